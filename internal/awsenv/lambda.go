package awsenv

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/credentials/endpointcreds"
	"github.com/aws/smithy-go/logging"
)

// Refused are the settings config.LoadDefaultConfig acts on that Lambda's configuration does not
// implement: CheckLambda refuses an environment that sets one (to anything but the empty string).
// Shared files and profiles, web identity, assumed roles and IMDS are credential sources a
// function does not have; the rest are settings no function here uses. A function that needs one
// is built without -tags lambda.norpc (config.LoadDefaultConfig), or the loader learns it.
var Refused = []string{
	"AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE",
	"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME", "AWS_LOGIN_CACHE_DIRECTORY",
	"AWS_EC2_METADATA_DISABLED", "AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE",
	"AWS_EC2_METADATA_V1_DISABLED",
	"AWS_DEFAULTS_MODE", "AWS_USE_DUALSTACK_ENDPOINT", "AWS_USE_FIPS_ENDPOINT", "AWS_ENABLE_ENDPOINT_DISCOVERY",
	"AWS_S3_USE_ARN_REGION", "AWS_S3_DISABLE_MULTIREGION_ACCESS_POINTS", "AWS_S3_DISABLE_EXPRESS_SESSION_AUTH",
	"AWS_DISABLE_REQUEST_COMPRESSION", "AWS_REQUEST_MIN_COMPRESSION_SIZE_BYTES", "AWS_DISABLE_CLOCK_SKEW_CORRECTION",
	"AWS_ACCOUNT_ID_ENDPOINT_MODE", "AWS_AUTH_SCHEME_PREFERENCE", "AWS_RESTRICT_FILE_PERMISSIONS",
}

// Read are the settings Lambda reads, as config.LoadDefaultConfig does (AWS_ENDPOINT_URL_<SERVICE>
// besides). AWS_EXECUTION_ENV, which config reads for the user agent and Lambda sets, is neither
// read nor refused.
var Read = []string{
	"AWS_REGION", "AWS_DEFAULT_REGION",
	"AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SECRET_KEY", "AWS_SESSION_TOKEN", "AWS_ACCOUNT_ID",
	"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
	"AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
	"AWS_ENDPOINT_URL", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
	"AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE", "AWS_CA_BUNDLE",
	"AWS_REQUEST_CHECKSUM_CALCULATION", "AWS_RESPONSE_CHECKSUM_VALIDATION", "AWS_SDK_UA_APP_ID",
}

// CheckLambda returns an error naming every setting of environ (os.Environ's form) in Refused that
// is set to something, nil when there is none.
func CheckLambda(environ []string) error {
	var set []string
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if value != "" && slices.Contains(Refused, name) {
			set = append(set, name)
		}
	}
	if len(set) == 0 {
		return nil
	}
	slices.Sort(set)
	return fmt.Errorf("the Lambda functions' AWS configuration does not read %s (docs/configuration.md, "+
		"\"AWS SDK settings on Lambda\"): unset it, or build the function without -tags lambda.norpc", strings.Join(set, ", "))
}

// ecsContainerEndpoint is the container credentials endpoint AWS_CONTAINER_CREDENTIALS_RELATIVE_URI
// is a path of. A variable so that a test can point it elsewhere.
var ecsContainerEndpoint = "http://169.254.170.2"

// Lambda returns the AWS configuration Lambda's environment (read with getenv) gives, as
// config.LoadDefaultConfig would from that environment with no shared file: see the package's
// documentation for what it reads. Nothing is fetched: container credentials are fetched at their
// first use, as config's are.
func Lambda(getenv func(string) string) (aws.Config, error) {
	cfg := aws.Config{
		Region:        cmp.Or(getenv("AWS_REGION"), getenv("AWS_DEFAULT_REGION")),
		AppID:         getenv("AWS_SDK_UA_APP_ID"),
		ConfigSources: []any{sources{getenv}},
		// config's defaults, as it sets them when nothing configures them.
		Logger:                      logging.NewStandardLogger(os.Stderr),
		DefaultsMode:                aws.DefaultsModeLegacy,
		RequestMinCompressSizeBytes: 10240,
		AccountIDEndpointMode:       aws.AccountIDEndpointModePreferred,
		RestrictFilePermissions:     aws.RestrictFilePermissionsUserReadWrite,
	}
	var err error
	if cfg.Credentials, err = lambdaCredentials(getenv); err != nil {
		return aws.Config{}, err
	}
	if v := getenv("AWS_ENDPOINT_URL"); v != "" {
		cfg.BaseEndpoint = &v
	}
	ignore, err := boolSetting(getenv, "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")
	if err != nil {
		return aws.Config{}, err
	}
	if ignore != nil && *ignore {
		cfg.BaseEndpoint = nil
	}
	if v := getenv("AWS_MAX_ATTEMPTS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return aws.Config{}, fmt.Errorf("invalid value AWS_MAX_ATTEMPTS=%s, %w", v, err)
		}
		cfg.RetryMaxAttempts = int(n)
	}
	if v := getenv("AWS_RETRY_MODE"); v != "" {
		if cfg.RetryMode, err = aws.ParseRetryMode(v); err != nil {
			return aws.Config{}, fmt.Errorf("invalid AWS_RETRY_MODE value, %w", err)
		}
	}
	// Unset: when supported, config's default.
	if cfg.RequestChecksumCalculation, err = checksumSetting(getenv, "AWS_REQUEST_CHECKSUM_CALCULATION",
		aws.RequestChecksumCalculationWhenSupported, aws.RequestChecksumCalculationWhenRequired); err != nil {
		return aws.Config{}, err
	}
	if cfg.ResponseChecksumValidation, err = checksumSetting(getenv, "AWS_RESPONSE_CHECKSUM_VALIDATION",
		aws.ResponseChecksumValidationWhenSupported, aws.ResponseChecksumValidationWhenRequired); err != nil {
		return aws.Config{}, err
	}
	if path := getenv("AWS_CA_BUNDLE"); path != "" {
		if cfg.HTTPClient, err = caBundleClient(path); err != nil {
			return aws.Config{}, err
		}
	}
	return cfg, nil
}

// lambdaCredentials are the role's credentials from the environment, else the container credentials
// endpoint's, cached as config caches them.
func lambdaCredentials(getenv func(string) string) (aws.CredentialsProvider, error) {
	creds := aws.Credentials{
		AccessKeyID:     cmp.Or(getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_ACCESS_KEY")),
		SecretAccessKey: cmp.Or(getenv("AWS_SECRET_ACCESS_KEY"), getenv("AWS_SECRET_KEY")),
		Source:          "EnvConfigCredentials", // config's name for them
	}
	if creds.HasKeys() {
		creds.SessionToken = getenv("AWS_SESSION_TOKEN")
		creds.AccountID = getenv("AWS_ACCOUNT_ID")
		return aws.NewCredentialsCache(credentials.StaticCredentialsProvider{Value: creds}), nil
	}
	endpoint := ""
	if rel := getenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"); rel != "" {
		endpoint = ecsContainerEndpoint + rel
	} else if full := getenv("AWS_CONTAINER_CREDENTIALS_FULL_URI"); full != "" {
		if err := allowedContainerEndpoint(full); err != nil {
			return nil, fmt.Errorf("AWS_CONTAINER_CREDENTIALS_FULL_URI: %w", err)
		}
		endpoint = full
	} else {
		return nil, errors.New("no AWS credentials: Lambda sets AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, " +
			"or AWS_CONTAINER_CREDENTIALS_FULL_URI or AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (SnapStart, managed instances), " +
			"and none is set")
	}
	token, tokenFile := getenv("AWS_CONTAINER_AUTHORIZATION_TOKEN"), getenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")
	provider := endpointcreds.New(endpoint, func(o *endpointcreds.Options) {
		o.AuthorizationToken = token
		if tokenFile != "" {
			o.AuthorizationTokenProvider = endpointcreds.TokenProviderFunc(func() (string, error) {
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					return "", fmt.Errorf("failed to read authorization token from %v: %v", tokenFile, err)
				}
				return string(b), nil
			})
		}
	})
	return aws.NewCredentialsCache(provider, func(o *aws.CredentialsCacheOptions) { o.ExpiryWindow = 5 * time.Minute }), nil
}

// allowedContainerEndpoint is config's check of a full container credentials URI: over plain HTTP
// only to a loopback address or the ECS and EKS container hosts.
func allowedContainerEndpoint(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil {
		return fmt.Errorf("invalid URL, %w", err)
	}
	host := u.Hostname()
	if host == "" {
		return errors.New("unable to parse host from local HTTP cred provider URL")
	}
	if u.Scheme != "http" {
		return nil
	}
	addrs := []string{host}
	if net.ParseIP(host) == nil {
		if addrs, err = net.LookupHost(host); err != nil {
			return fmt.Errorf("failed to resolve host %q, %v", host, err)
		}
	}
	for _, a := range addrs {
		ip := net.ParseIP(a)
		if ip == nil || !(ip.IsLoopback() || ip.Equal(net.IPv4(169, 254, 170, 2)) || ip.Equal(net.IPv4(169, 254, 170, 23)) ||
			ip.Equal(net.ParseIP("fd00:ec2::23"))) {
			return fmt.Errorf("invalid endpoint host, %q, only loopback/ecs/eks hosts are allowed", host)
		}
	}
	return nil
}

// caBundleClient is the SDK's HTTP client trusting the certificates of the PEM file at path, and
// only those, as config makes it for AWS_CA_BUNDLE.
func caBundleClient(path string) (aws.HTTPClient, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("failed to read custom CA bundle PEM file: AWS_CA_BUNDLE=%s: %w", path, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("failed to load custom CA bundle PEM file: AWS_CA_BUNDLE=%s holds no certificate", path)
	}
	return awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		if tr.TLSClientConfig == nil {
			tr.TLSClientConfig = &tls.Config{}
		}
		tr.TLSClientConfig.RootCAs = pool
	}), nil
}

func boolSetting(getenv func(string) string, name string) (*bool, error) {
	v := getenv(name)
	switch {
	case v == "":
		return nil, nil
	case strings.EqualFold(v, "true"):
		return aws.Bool(true), nil
	case strings.EqualFold(v, "false"):
		return aws.Bool(false), nil
	}
	return nil, fmt.Errorf("invalid value for environment variable, %s=%s, need true or false", name, v)
}

func checksumSetting[T ~int](getenv func(string) string, name string, whenSupported, whenRequired T) (T, error) {
	switch v := getenv(name); strings.ToLower(v) {
	case "", "when_supported":
		return whenSupported, nil
	case "when_required":
		return whenRequired, nil
	default:
		return 0, fmt.Errorf("invalid value for environment variable, %s=%s, must be when_supported/when_required", name, v)
	}
}

// sources is what the service clients ask the configuration's ConfigSources for: the
// AWS_ENDPOINT_URL_<SERVICE> overrides, and whether configured endpoints are ignored.
type sources struct{ getenv func(string) string }

// GetServiceBaseEndpoint is AWS_ENDPOINT_URL_<SERVICE>, the service's SDK id upper-cased with its
// spaces as underscores (SQS, S3, SECRETS_MANAGER).
func (s sources) GetServiceBaseEndpoint(_ context.Context, sdkID string) (string, bool, error) {
	v := s.getenv("AWS_ENDPOINT_URL_" + strings.ReplaceAll(strings.ToUpper(sdkID), " ", "_"))
	return v, v != "", nil
}

// GetIgnoreConfiguredEndpoints is AWS_IGNORE_CONFIGURED_ENDPOINT_URLS.
func (s sources) GetIgnoreConfiguredEndpoints(context.Context) (bool, bool, error) {
	b, err := boolSetting(s.getenv, "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")
	if b == nil || err != nil {
		return false, false, err
	}
	return *b, true, nil
}
