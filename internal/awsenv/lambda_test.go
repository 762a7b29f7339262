package awsenv

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"
)

// clearAWS clears every AWS_ variable before a case, so that the machine's
// environment (an AWS_CA_BUNDLE, a profile) does not enter the comparison.
func clearAWS(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "AWS_") {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
	none := filepath.Join(t.TempDir(), "none")
	// config.LoadDefaultConfig reads ~/.aws files by default; Lambda has none. (Lambda refuses
	// these variables: they are set for config's side only.)
	t.Setenv("AWS_CONFIG_FILE", none)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", none)
}

// loaded is what the service clients take from a configuration, as a comparable value.
type loaded struct {
	Region, AppID           string
	Creds                   aws.Credentials
	BaseEndpoint            string
	SQS, S3, SecretsManager string
	MaxAttempts             int
	RetryMode               aws.RetryMode
	RequestChecksum         aws.RequestChecksumCalculation
	ResponseChecksum        aws.ResponseChecksumValidation
	CustomHTTPClient        bool
}

func describe(t *testing.T, cfg aws.Config) loaded {
	t.Helper()
	l := loaded{Region: cfg.Region, AppID: cfg.AppID, MaxAttempts: cfg.RetryMaxAttempts, RetryMode: cfg.RetryMode,
		RequestChecksum: cfg.RequestChecksumCalculation, ResponseChecksum: cfg.ResponseChecksumValidation,
		CustomHTTPClient: cfg.HTTPClient != nil}
	if cfg.BaseEndpoint != nil {
		l.BaseEndpoint = *cfg.BaseEndpoint
	}
	if cfg.Credentials != nil {
		c, err := cfg.Credentials.Retrieve(context.Background())
		require.NoError(t, err)
		c.Expires = c.Expires.Truncate(time.Second)
		l.Creds = c
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	l.SQS = str(sqs.NewFromConfig(cfg).Options().BaseEndpoint)
	l.S3 = str(s3.NewFromConfig(cfg).Options().BaseEndpoint)
	l.SecretsManager = str(secretsmanager.NewFromConfig(cfg).Options().BaseEndpoint)
	return l
}

// Lambda's configuration is config.LoadDefaultConfig's for every setting it reads: what each client
// the functions use (SQS, S3, Secrets Manager) takes from it, and the same errors for bad values.
func TestLambdaLoadsWhatLoadDefaultConfigLoads(t *testing.T) {
	expires := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	creds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "container-token" {
			http.Error(w, `{"code":"denied","message":"token `+r.Header.Get("Authorization")+`"}`, http.StatusForbidden)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"AccessKeyId": "container-key", "SecretAccessKey": "container-secret",
			"Token": "container-session", "Expiration": expires})
	}))
	defer creds.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("container-token"), 0o600))
	keys := []string{"AWS_ACCESS_KEY_ID=key", "AWS_SECRET_ACCESS_KEY=secret", "AWS_SESSION_TOKEN=session"}
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"lambda's own", append([]string{"AWS_REGION=eu-west-1", "AWS_DEFAULT_REGION=eu-west-1"}, keys...)},
		{"default region only", append([]string{"AWS_DEFAULT_REGION=eu-central-1"}, keys...)},
		{"older key names", []string{"AWS_REGION=us-east-1", "AWS_ACCESS_KEY=old", "AWS_SECRET_KEY=oldsecret", "AWS_ACCOUNT_ID=123456789012"}},
		{"keys before the container's", append([]string{"AWS_REGION=us-east-1", "AWS_CONTAINER_CREDENTIALS_FULL_URI=" + creds.URL}, keys...)},
		{"container credentials (SnapStart)", []string{"AWS_REGION=us-east-1", "AWS_CONTAINER_CREDENTIALS_FULL_URI=" + creds.URL,
			"AWS_CONTAINER_AUTHORIZATION_TOKEN=container-token"}},
		{"container token in a file", []string{"AWS_REGION=us-east-1", "AWS_CONTAINER_CREDENTIALS_FULL_URI=" + creds.URL,
			"AWS_CONTAINER_AUTHORIZATION_TOKEN=wrong", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=" + tokenFile}},
		{"one endpoint", append([]string{"AWS_REGION=us-east-1", "AWS_ENDPOINT_URL=http://127.0.0.1:4566"}, keys...)},
		{"per service", append([]string{"AWS_REGION=us-east-1", "AWS_ENDPOINT_URL_SQS=http://127.0.0.1:4100",
			"AWS_ENDPOINT_URL_S3=http://127.0.0.1:4200", "AWS_ENDPOINT_URL_SECRETS_MANAGER=http://127.0.0.1:4300"}, keys...)},
		{"both", append([]string{"AWS_REGION=us-east-1", "AWS_ENDPOINT_URL=http://127.0.0.1:4566",
			"AWS_ENDPOINT_URL_SQS=http://127.0.0.1:4100"}, keys...)},
		{"ignored", append([]string{"AWS_REGION=us-east-1", "AWS_ENDPOINT_URL=http://127.0.0.1:4566",
			"AWS_ENDPOINT_URL_SQS=http://127.0.0.1:4100", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=TRUE"}, keys...)},
		{"not ignored", append([]string{"AWS_REGION=us-east-1", "AWS_ENDPOINT_URL_S3=http://127.0.0.1:4200",
			"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=false"}, keys...)},
		{"retries", append([]string{"AWS_REGION=us-east-1", "AWS_MAX_ATTEMPTS=7", "AWS_RETRY_MODE=adaptive"}, keys...)},
		{"checksums and app id", append([]string{"AWS_REGION=us-east-1", "AWS_REQUEST_CHECKSUM_CALCULATION=WHEN_REQUIRED",
			"AWS_RESPONSE_CHECKSUM_VALIDATION=when_supported", "AWS_SDK_UA_APP_ID=exactlyonce"}, keys...)},
		{"bad attempts", append([]string{"AWS_MAX_ATTEMPTS=x"}, keys...)},
		{"bad retry mode", append([]string{"AWS_RETRY_MODE=sometimes"}, keys...)},
		{"bad checksum", append([]string{"AWS_REQUEST_CHECKSUM_CALCULATION=always"}, keys...)},
		{"bad ignore", append([]string{"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=yes"}, keys...)},
		{"container endpoint not local", []string{"AWS_CONTAINER_CREDENTIALS_FULL_URI=http://192.0.2.1/creds"}},
		{"missing CA bundle", append([]string{"AWS_CA_BUNDLE=/nonexistent/bundle.pem"}, keys...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearAWS(t)
			for _, kv := range tc.env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			want, wantErr := awsconfig.LoadDefaultConfig(context.Background())
			got, err := Lambda(os.Getenv)
			if wantErr != nil {
				require.Error(t, err, "config.LoadDefaultConfig: %v", wantErr)
				// The variable config names, named too.
				for _, v := range regexp.MustCompile(`AWS_[A-Z_]+`).FindAllString(wantErr.Error(), -1) {
					require.Contains(t, err.Error(), v)
				}
				return
			}
			require.NoError(t, err)
			if _, cerr := want.Credentials.Retrieve(context.Background()); cerr != nil {
				t.Fatalf("config's credentials: %v", cerr)
			}
			require.Equal(t, describe(t, want), describe(t, got))
		})
	}
}

// Every field of the configuration that the settings do not make is config.LoadDefaultConfig's (its
// defaults: the logger, the defaults mode, the compression threshold, ...): an SDK upgrade that gives
// config a new default fails here. The credentials, the HTTP client and the config sources are
// compared by what they do (TestLambdaLoadsWhatLoadDefaultConfigLoads, TestCABundle); an empty
// interceptor registry is a nil one.
func TestLambdaHasLoadDefaultConfigsDefaults(t *testing.T) {
	clearAWS(t)
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	want, err := awsconfig.LoadDefaultConfig(context.Background())
	require.NoError(t, err)
	got, err := Lambda(os.Getenv)
	require.NoError(t, err)
	w, g := reflect.ValueOf(want), reflect.ValueOf(got)
	for i := range w.NumField() {
		name := w.Type().Field(i).Name
		a, b := w.Field(i).Interface(), g.Field(i).Interface()
		switch name {
		case "Credentials", "HTTPClient", "ConfigSources", "Interceptors":
			continue
		case "Logger":
			a, b = fmt.Sprintf("%T", a), fmt.Sprintf("%T", b)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: config.LoadDefaultConfig %#v, Lambda %#v", name, a, b)
		}
	}
}

// A container credentials endpoint over plain HTTP to a host that is not local: both loaders refuse
// it (config at its load or at the credentials' first use).
func TestContainerCredentialsOnlyFromALocalEndpoint(t *testing.T) {
	clearAWS(t)
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://192.0.2.1/creds")
	cfg, err := awsconfig.LoadDefaultConfig(context.Background())
	if err == nil {
		_, err = cfg.Credentials.Retrieve(context.Background())
	}
	require.ErrorContains(t, err, "only loopback/ecs/eks hosts are allowed")
	_, err = Lambda(os.Getenv)
	require.ErrorContains(t, err, "only loopback/ecs/eks hosts are allowed")
}

// AWS_CA_BUNDLE: the clients trust its certificates and only those, with either loader.
func TestCABundle(t *testing.T) {
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }))
	defer server.Close()
	// Another certificate: httptest's servers all have the same.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other"}, IsCA: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	otherDER, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	dir := t.TempDir()
	bundle := func(name string, der []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
		return p
	}
	get := func(cfg aws.Config) error {
		req, _ := http.NewRequest(http.MethodGet, server.URL, nil)
		resp, err := cfg.HTTPClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	for _, tc := range []struct {
		bundle string
		ok     bool
	}{{bundle("server.pem", server.Certificate().Raw), true}, {bundle("other.pem", otherDER), false}} {
		clearAWS(t)
		t.Setenv("AWS_ACCESS_KEY_ID", "k")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
		t.Setenv("AWS_CA_BUNDLE", tc.bundle)
		want, err := awsconfig.LoadDefaultConfig(context.Background())
		require.NoError(t, err)
		got, err := Lambda(os.Getenv)
		require.NoError(t, err)
		for name, cfg := range map[string]aws.Config{"config": want, "lambda": got} {
			if err := get(cfg); (err == nil) != tc.ok {
				t.Errorf("%s, bundle %s: request error %v, want success %v", name, filepath.Base(tc.bundle), err, tc.ok)
			}
		}
	}
	empty := filepath.Join(dir, "empty.pem")
	require.NoError(t, os.WriteFile(empty, []byte("no certificate"), 0o600))
	clearAWS(t)
	t.Setenv("AWS_CA_BUNDLE", empty)
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	_, err = Lambda(os.Getenv)
	require.ErrorContains(t, err, "AWS_CA_BUNDLE")
}

// AWS_CONTAINER_CREDENTIALS_RELATIVE_URI is a path on the ECS container host (config's
// ecsContainerEndpoint, which a test cannot move, so Lambda's alone here): asked with the token.
func TestContainerCredentialsByRelativeURI(t *testing.T) {
	var paths, tokens []string
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths, tokens = append(paths, r.URL.Path), append(tokens, r.Header.Get("Authorization"))
		_ = json.NewEncoder(w).Encode(map[string]string{"AccessKeyId": "relative-key", "SecretAccessKey": "s",
			"Token": "t", "Expiration": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	}))
	defer server.Close()
	defer func(old string) { ecsContainerEndpoint = old }(ecsContainerEndpoint)
	ecsContainerEndpoint = server.URL
	clearAWS(t)
	t.Setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/abc")
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:1/not-this-one")
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "tok")
	cfg, err := Lambda(os.Getenv)
	require.NoError(t, err)
	c, err := cfg.Credentials.Retrieve(context.Background())
	require.NoError(t, err)
	require.Equal(t, "relative-key", c.AccessKeyID)
	require.Equal(t, []string{"/v2/credentials/abc"}, paths)
	require.Equal(t, []string{"tok"}, tokens)
}

// Without keys or a container endpoint there are no credentials: the load says so.
func TestNoCredentials(t *testing.T) {
	clearAWS(t)
	_, err := Lambda(os.Getenv)
	require.ErrorContains(t, err, "no AWS credentials")
	require.ErrorContains(t, err, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "the message names every source it reads")
}

// Every variable config.LoadDefaultConfig reads is read by Lambda's configuration or refused by its
// check (or is AWS_EXECUTION_ENV, Lambda's own, which config reads for the user agent): an SDK
// upgrade that adds a setting fails here until the setting is one or the other.
func TestEveryConfigSettingIsReadOrRefused(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/aws/aws-sdk-go-v2/config").Output()
	require.NoError(t, err)
	files, err := filepath.Glob(filepath.Join(strings.TrimSpace(string(out)), "*.go"))
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range regexp.MustCompile(`"(AWS_[A-Z0-9_]+)"`).FindAllStringSubmatch(string(b), -1) {
			seen[m[1]] = true
		}
	}
	require.Greater(t, len(seen), 30, "config's variables are not read right")
	for v := range seen {
		if v != "AWS_EXECUTION_ENV" && !slices.Contains(Read, v) && !slices.Contains(Refused, v) {
			t.Errorf("config.LoadDefaultConfig reads %s, which Lambda's configuration neither reads nor refuses", v)
		}
	}
	for _, v := range Refused {
		require.False(t, slices.Contains(Read, v), v)
	}
}

// The check refuses each refused setting set to something, naming it, and nothing else: what Lambda
// sets, what the loader reads, and a refused one set empty.
func TestCheckLambda(t *testing.T) {
	lambdaSets := []string{"AWS_REGION=us-east-1", "AWS_DEFAULT_REGION=us-east-1", "AWS_EXECUTION_ENV=AWS_Lambda_provided.al2023",
		"AWS_LAMBDA_FUNCTION_NAME=api", "AWS_ACCESS_KEY_ID=k", "AWS_SECRET_ACCESS_KEY=s", "AWS_SESSION_TOKEN=t",
		"AWS_XRAY_DAEMON_ADDRESS=169.254.79.129:2000", "AWS_ENDPOINT_URL_SQS=http://127.0.0.1:1", "AWS_PROFILE="}
	for _, v := range Read {
		lambdaSets = append(lambdaSets, v+"=x")
	}
	require.NoError(t, CheckLambda(lambdaSets))
	for _, v := range Refused {
		err := CheckLambda(append(slices.Clone(lambdaSets), v+"=x"))
		require.ErrorContains(t, err, v)
	}
	err := CheckLambda([]string{"AWS_PROFILE=p", "AWS_ROLE_ARN=arn"})
	require.ErrorContains(t, err, "AWS_PROFILE, AWS_ROLE_ARN")
}
