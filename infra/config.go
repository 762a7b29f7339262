package infra

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/constructs-go/constructs/v10"
)

// StackName is the CloudFormation stack name, so `cdk synth` writes cdk.out/ExactlyOnce.template.json.
const StackName = "ExactlyOnce"

// Context keys accepted on the command line (`cdk synth -c key=value`) or in cdk.json.
const (
	// ctxAssetDir is the folder holding <function>/bootstrap for each function (default build/lambda).
	ctxAssetDir = "assetDir"
	// ctxPublicAPI set to true opens the API without authorisation (demo only).
	ctxPublicAPI = "publicApi"
	// ctxLocalStack set to true builds the LocalStack variant: no VPC, Aurora or RDS Proxy;
	// the functions get DB_DSN instead.
	ctxLocalStack = "localstack"
	// ctxDBDSN is the DSN the LocalStack variant passes to every function as DB_DSN.
	ctxDBDSN = "dbDsn"
	// ctxAWSEndpointURL is the AWS_ENDPOINT_URL the LocalStack variant passes to every function.
	ctxAWSEndpointURL = "awsEndpointUrl"
	// ctxLambdaArch is arm64 (default, what AWS runs) or x86_64 (LocalStack on an x86 host without emulation).
	ctxLambdaArch = "lambdaArch"
	// ctxSweeperShards is SWEEPER_SHARDS: how many sweeper agents run at once, each on its static
	// shard of the hash space, each with its own schedule rule (default defaultSweeperShards).
	ctxSweeperShards = "sweeperShards"
	// ctxNatGateways is how many NAT gateways give the delivering functions their way out: 1 (default,
	// in the first AZ) or 2 (one per AZ, so that deliveries survive the loss of an AZ's NAT gateway).
	// Ignored by the LocalStack variant, which has no VPC.
	ctxNatGateways = "natGateways"
	// ctxAlarmEmail, when set, subscribes this address to the alarm topic (notify.go). SNS sends it a
	// confirmation mail first; until it is confirmed nothing is delivered.
	ctxAlarmEmail = "alarmEmail"
	// ctxHistoryRetention is the sweeper's HISTORY_RETENTION, a Go duration (default
	// defaultHistoryRetention, history.go): how long packed pages stay in Aurora before they are
	// archived to the history bucket; 0 archives them as soon as they are packed.
	ctxHistoryRetention = "historyRetention"
)

// Defaults for the LocalStack variant: the MySQL and LocalStack services of localstack/docker-compose.yml,
// reached by name from Lambda containers attached to the compose network.
const (
	DefaultLocalDSN         = "app:app@tcp(mysql:3306)/events?parseTime=true&interpolateParams=true"
	DefaultLocalEndpointURL = "http://localstack:4566"
)

// Config is what the command line may change about the stack. Everything else is fixed in code,
// where the tests can see it.
type Config struct {
	// AssetDir holds one folder per function, each with its `bootstrap` executable.
	AssetDir string
	// PublicAPI turns off authorisation on the API methods (AuthorizationType NONE).
	PublicAPI bool
	// LocalStack builds the variant for LocalStack's free plan.
	LocalStack bool
	// DBDSN is passed as DB_DSN in the LocalStack variant.
	DBDSN string
	// AWSEndpointURL is passed as AWS_ENDPOINT_URL in the LocalStack variant.
	AWSEndpointURL string
	// LambdaArch is "arm64" or "x86_64".
	LambdaArch string
	// SweeperShards is how many sweeper agents run at once (SWEEPER_SHARDS), 1 to maxSweeperShards.
	SweeperShards int
	// NatGateways is how many NAT gateways the VPC has, 1 to vpcMaxAzs (docs/deploy.md, "Webhook delivery").
	NatGateways int
	// AlarmEmail, if not empty, is subscribed to the alarm topic.
	AlarmEmail string
	// HistoryRetention is the sweeper's HISTORY_RETENTION (history.go); nil means the default.
	HistoryRetention *time.Duration
}

// ConfigFromContext reads Config from the construct tree's context (cdk.json and -c flags).
func ConfigFromContext(node constructs.Node) (Config, error) {
	cfg := Config{
		AssetDir:       "build/lambda",
		DBDSN:          DefaultLocalDSN,
		AWSEndpointURL: DefaultLocalEndpointURL,
		LambdaArch:     "arm64",
		SweeperShards:  defaultSweeperShards,
		NatGateways:    defaultNatGateways,
	}
	var err error
	if v, ok := contextString(node, ctxAssetDir); ok {
		cfg.AssetDir = v
	}
	if cfg.PublicAPI, err = contextBool(node, ctxPublicAPI); err != nil {
		return cfg, err
	}
	if cfg.LocalStack, err = contextBool(node, ctxLocalStack); err != nil {
		return cfg, err
	}
	if v, ok := contextString(node, ctxDBDSN); ok {
		cfg.DBDSN = v
	}
	if v, ok := contextString(node, ctxAWSEndpointURL); ok {
		cfg.AWSEndpointURL = v
	}
	if v, ok := contextString(node, ctxLambdaArch); ok {
		cfg.LambdaArch = v
	}
	if v, ok := contextString(node, ctxSweeperShards); ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return cfg, fmt.Errorf("context %s=%q: want an integer", ctxSweeperShards, v)
		}
		cfg.SweeperShards = n
	}
	if v, ok := contextString(node, ctxNatGateways); ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return cfg, fmt.Errorf("context %s=%q: want an integer", ctxNatGateways, v)
		}
		cfg.NatGateways = n
	}
	if v, ok := contextString(node, ctxAlarmEmail); ok {
		cfg.AlarmEmail = strings.TrimSpace(v)
	}
	if v, ok := contextString(node, ctxHistoryRetention); ok {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return cfg, fmt.Errorf("context %s=%q: want a Go duration such as 720h", ctxHistoryRetention, v)
		}
		cfg.HistoryRetention = &d
	}
	return cfg, cfg.Validate()
}

// Validate reports settings that cannot produce a working stack.
func (c Config) Validate() error {
	if c.AssetDir == "" {
		return fmt.Errorf("context %s must not be empty", ctxAssetDir)
	}
	switch c.LambdaArch {
	case "arm64", "x86_64":
	default:
		return fmt.Errorf("context %s=%q: want arm64 or x86_64", ctxLambdaArch, c.LambdaArch)
	}
	if c.SweeperShards < 1 || c.SweeperShards > maxSweeperShards {
		return fmt.Errorf("context %s=%d: want 1 to %d", ctxSweeperShards, c.SweeperShards, maxSweeperShards)
	}
	if !c.LocalStack && (c.NatGateways < 1 || c.NatGateways > vpcMaxAzs) {
		return fmt.Errorf("context %s=%d: want 1 to %d (one per AZ); webhook delivery needs a way out", ctxNatGateways, c.NatGateways, vpcMaxAzs)
	}
	if c.AlarmEmail != "" && !validEmail(c.AlarmEmail) {
		return fmt.Errorf("context %s=%q: want one email address (name@domain)", ctxAlarmEmail, c.AlarmEmail)
	}
	if c.HistoryRetention != nil && *c.HistoryRetention < 0 {
		return fmt.Errorf("context %s=%s: want a duration of 0 or more (0 archives pages as soon as they are packed)", ctxHistoryRetention, *c.HistoryRetention)
	}
	if c.LocalStack && c.DBDSN == "" {
		return fmt.Errorf("context %s=true needs %s", ctxLocalStack, ctxDBDSN)
	}
	if !c.LocalStack && c.DBDSN != DefaultLocalDSN {
		return fmt.Errorf("context %s is only used with %s=true; in AWS the functions reach Aurora through RDS Proxy", ctxDBDSN, ctxLocalStack)
	}
	return nil
}

// contextString returns a context value as a string; the CLI passes -c values as strings,
// cdk.json may hold any JSON value.
func contextString(node constructs.Node, key string) (string, bool) {
	v := node.TryGetContext(&key)
	if v == nil {
		return "", false
	}
	switch t := v.(type) {
	case string:
		return t, true
	default:
		return fmt.Sprint(t), true
	}
}

func contextBool(node constructs.Node, key string) (bool, error) {
	s, ok := contextString(node, key)
	if !ok || s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(strings.TrimSpace(s))
	if err != nil {
		return false, fmt.Errorf("context %s=%q: want true or false", key, s)
	}
	return b, nil
}

// validEmail is a sanity check of an address, not RFC 5322: one @, something either side, a dot in
// the domain, no spaces or commas (one address, not a list).
func validEmail(s string) bool {
	local, domain, ok := strings.Cut(s, "@")
	return ok && local != "" && strings.Contains(domain, ".") && !strings.HasPrefix(domain, ".") &&
		!strings.HasSuffix(domain, ".") && !strings.ContainsAny(s, " ,;\t") && !strings.Contains(domain, "@")
}
