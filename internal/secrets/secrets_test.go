package secrets_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/exactlyonce/exactlyonce/internal/secrets"
)

// The tests answer the Secrets Manager JSON protocol (awsJson1_1) from a loopback server: the SDK's
// real client, signing and decoding, pointed at it with AWS_ENDPOINT_URL(_SECRETS_MANAGER).

const (
	testARN   = "arn:aws:secretsmanager:us-east-1:123456789012:secret:webhook-AbCdEf"
	testValue = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // what must never appear in an error
)

// fakeSecretsManager answers GetSecretValue with answer(secretID) and counts the calls.
type fakeSecretsManager struct {
	t      *testing.T
	mu     sync.Mutex
	calls  int
	auth   string // the last call's Authorization
	answer func(w http.ResponseWriter, secretID string)
}

func (f *fakeSecretsManager) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if got := r.Header.Get("X-Amz-Target"); got != "secretsmanager.GetSecretValue" {
		f.t.Errorf("X-Amz-Target %q, want secretsmanager.GetSecretValue", got)
		http.Error(w, "unexpected call", http.StatusBadRequest)
		return
	}
	if got := r.Header.Get("Content-Type"); got != "application/x-amz-json-1.1" {
		f.t.Errorf("Content-Type %q, want application/x-amz-json-1.1", got)
	}
	// Signed with SigV4 for the secretsmanager service, from the environment's credentials.
	if got := r.Header.Get("Authorization"); !strings.Contains(got, "/secretsmanager/aws4_request") {
		f.t.Errorf("Authorization %q: not a SigV4 signature for secretsmanager", got)
	}
	var in struct{ SecretId, VersionStage, VersionId string }
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &in); err != nil {
		f.t.Errorf("request body %q: %v", body, err)
	}
	if in.VersionStage != "" || in.VersionId != "" {
		f.t.Errorf("request asks for a version (%q, %q); want the current one", in.VersionStage, in.VersionId)
	}
	f.mu.Lock()
	f.calls++
	f.auth = r.Header.Get("Authorization")
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	f.answer(w, in.SecretId)
}

func (f *fakeSecretsManager) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// serve starts the fake and points the SDK at it through endpointVar; credentials and region come
// from the environment, and no shared config file or instance metadata is read.
func serve(t *testing.T, endpointVar string, answer func(w http.ResponseWriter, secretID string)) *fakeSecretsManager {
	t.Helper()
	f := &fakeSecretsManager{t: t, answer: answer}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ENDPOINT_URL":                 "",
		"AWS_ENDPOINT_URL_SECRETS_MANAGER": "",
		"AWS_REGION":                       "us-east-1",
		"AWS_ACCESS_KEY_ID":                "AKIDTEST",
		"AWS_SECRET_ACCESS_KEY":            "test",
		"AWS_SESSION_TOKEN":                "",
		"AWS_PROFILE":                      "",
		"AWS_CONFIG_FILE":                  filepath.Join(dir, "config"),
		"AWS_SHARED_CREDENTIALS_FILE":      filepath.Join(dir, "credentials"),
		"AWS_EC2_METADATA_DISABLED":        "true",
	} {
		t.Setenv(k, v)
	}
	t.Setenv(endpointVar, srv.URL)
	return f
}

func answerValue(t *testing.T) func(http.ResponseWriter, string) {
	return func(w http.ResponseWriter, id string) {
		if id != testARN {
			t.Errorf("SecretId %q, want %q", id, testARN)
		}
		json.NewEncoder(w).Encode(map[string]any{
			"ARN": testARN, "Name": "webhook", "SecretString": testValue,
			"VersionId": "v1", "VersionStages": []string{"AWSCURRENT"}, "CreatedDate": 1.7e9,
		})
	}
}

func TestResolveReadsOnceAndKeepsTheValue(t *testing.T) {
	for _, endpointVar := range []string{"AWS_ENDPOINT_URL_SECRETS_MANAGER", "AWS_ENDPOINT_URL"} {
		t.Run(endpointVar, func(t *testing.T) {
			f := serve(t, endpointVar, answerValue(t))
			var c secrets.Cache
			for i := range 3 {
				got, err := c.Resolve(context.Background(), testARN)
				if err != nil {
					t.Fatalf("call %d: %v", i+1, err)
				}
				if got != testValue {
					t.Fatalf("call %d: got %q, want %q", i+1, got, testValue)
				}
			}
			if n := f.count(); n != 1 {
				t.Errorf("%d calls to Secrets Manager for three resolutions, want 1", n)
			}
		})
	}
}

// The package's Resolve keeps values for the process: a second resolution makes no call.
func TestPackageResolveIsCachedForTheProcess(t *testing.T) {
	f := serve(t, "AWS_ENDPOINT_URL_SECRETS_MANAGER", answerValue(t))
	for range 2 {
		if got, err := secrets.Resolve(context.Background(), testARN); err != nil || got != testValue {
			t.Fatalf("Resolve = %q, %v; want %q", got, err, testValue)
		}
	}
	if n := f.count(); n != 1 {
		t.Errorf("%d calls, want 1", n)
	}
}

// An error answer: the error names the secret and the service's code and message, not the value, and
// it is not kept: the next call asks again, and gets the value once the service gives it.
func TestResolveErrorAnswer(t *testing.T) {
	var mu sync.Mutex
	fail := true
	f := serve(t, "AWS_ENDPOINT_URL_SECRETS_MANAGER", func(w http.ResponseWriter, id string) {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"__type":"AccessDeniedException","Message":"User is not authorized to perform secretsmanager:GetSecretValue"}`)
			return
		}
		answerValue(t)(w, id)
	})
	var c secrets.Cache
	_, err := c.Resolve(context.Background(), testARN)
	if err == nil {
		t.Fatal("no error for an AccessDeniedException answer")
	}
	for _, want := range []string{testARN, "AccessDeniedException", "not authorized"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), testValue) {
		t.Errorf("error holds the secret: %q", err)
	}

	mu.Lock()
	fail = false
	mu.Unlock()
	if got, err := c.Resolve(context.Background(), testARN); err != nil || got != testValue {
		t.Fatalf("after the service recovered: %q, %v", got, err)
	}
	if n := f.count(); n != 2 {
		t.Errorf("%d calls, want 2: a failure must not be kept", n)
	}
}

// Answers the client cannot use, each carrying the value somewhere in the body: the error holds none
// of it, and names the secret.
func TestResolveUnusableAnswersKeepTheValueOut(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		status     int
		is         error
	}{
		// A binary secret: no SecretString. Its bytes must not be echoed either.
		{"binary", `{"ARN":"` + testARN + `","SecretBinary":"` + base64.StdEncoding.EncodeToString([]byte(testValue)) + `"}`, 200, secrets.ErrNoString},
		// A successful answer cut short.
		{"truncated", `{"ARN":"` + testARN + `","SecretString":"` + testValue, 200, nil},
		// The value in a field of the wrong type.
		{"wrong type", `{"SecretString":["` + testValue + `"]}`, 200, nil},
		// An error answer that is not JSON and quotes the value.
		{"undecodable error", `<html>` + testValue + `</html>`, 403, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			serve(t, "AWS_ENDPOINT_URL_SECRETS_MANAGER", func(w http.ResponseWriter, _ string) {
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			})
			var c secrets.Cache
			got, err := c.Resolve(context.Background(), testARN)
			if err == nil {
				t.Fatalf("no error; got %q", got)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %q is not %q", err, tc.is)
			}
			if !strings.Contains(err.Error(), testARN) {
				t.Errorf("error %q does not name the secret", err)
			}
			secret := strings.TrimPrefix(testValue, "whsec_")
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), base64.StdEncoding.EncodeToString([]byte(testValue))) {
				t.Errorf("error holds the secret: %q", err)
			}
		})
	}
}

func TestResolveWithoutARN(t *testing.T) {
	var c secrets.Cache
	if _, err := c.Resolve(context.Background(), ""); err == nil {
		t.Error("no error for an empty ARN")
	}
}

// A Cache given the process's AWS configuration builds its client from it, not from a second
// config.LoadDefaultConfig: here the given configuration's credentials are not the environment's,
// and the call is signed with them.
func TestResolveBuildsItsClientFromTheGivenConfiguration(t *testing.T) {
	f := serve(t, "AWS_ENDPOINT_URL_SECRETS_MANAGER", answerValue(t))
	cfg, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Credentials = credentials.NewStaticCredentialsProvider("AKIDGIVEN", "given", "")
	loads := 0
	c := secrets.Cache{Config: func() (aws.Config, error) { loads++; return cfg, nil }}
	got, err := c.Resolve(context.Background(), testARN)
	if err != nil || got != testValue {
		t.Fatalf("Resolve = %q, %v; want %q", got, err, testValue)
	}
	if loads != 1 || f.count() != 1 {
		t.Errorf("%d loads of the configuration and %d calls, want 1 and 1", loads, f.count())
	}
	if !strings.Contains(f.auth, "Credential=AKIDGIVEN/") {
		t.Errorf("signed with %q, not the given configuration's credentials", f.auth)
	}
}
