package console

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// Each allow-listed route reaches the API with its method, its path re-escaped, and only the query
// parameters it takes; the API's status and body come back as they are.
func TestAllowListedRoutesReachTheAPI(t *testing.T) {
	t.Parallel()
	fake := &fakeAPI{}
	base := serve(t, Options{API: fake})
	token := session(t, base)["csrfToken"]
	for _, c := range []struct{ method, path, want string }{
		{"GET", "/overview", "/overview"},
		{"GET", "/history", "/history"},
		{"GET", "/events", "/events"},
		{"GET", "/events?state=failed&kind=task&before=99&limit=50", "/events?before=99&kind=task&limit=50&state=failed"},
		{"GET", "/events/12", "/events/12"},
		{"GET", "/events/12/attempts", "/events/12/attempts"},
		{"GET", "/events/12/attempts?after=1000&limit=5", "/events/12/attempts?after=1000&limit=5"},
		{"GET", "/references/order-7/events", "/references/order-7/events"},
		{"GET", "/references/a%20b%3Fc%25d/events?after=3&limit=2", "/references/a%20b%3Fc%25d/events?after=3&limit=2"},
		{"GET", "/agents", "/agents"},
		{"GET", "/workers?active=true", "/workers?active=true"},
		{"GET", "/workers/w-1", "/workers/w-1"},
		{"GET", "/counters/user%201", "/counters/user%201"},
		{"GET", "/counters/u1?after=t%20%3F&limit=10", "/counters/u1?after=t+%3F&limit=10"},
		{"GET", "/counters/u1/order", "/counters/u1/order"},
		{"POST", "/events/12/retry", "/events/12/retry"},
		{"POST", "/references/order-7/retry", "/references/order-7/retry"},
	} {
		before := len(fake.received())
		status, h, body := do(t, c.method, base+"/ui/api"+c.path, "", map[string]string{"X-CSRF-Token": token})
		require.Equal(t, http.StatusOK, status, "%s %s: %s", c.method, c.path, body)
		require.Equal(t, "application/json", h.Get("Content-Type"))
		got := fake.received()
		require.Len(t, got, before+1, c.path)
		last := got[len(got)-1]
		target := last.Path
		if last.RawQuery != "" {
			target += "?" + last.RawQuery
		}
		require.Equal(t, c.method+" "+c.want, last.Method+" "+target)
		want, _ := json.Marshal(map[string]string{"path": last.Path})
		require.Equal(t, string(want), body, "the API's answer, as it is")
	}

	// The API's status and body pass through: a 404 stays a 404 with its message.
	fake.mu.Lock()
	fake.status, fake.body = http.StatusNotFound, `{"error":"no event 77"}`
	fake.mu.Unlock()
	status, _, body := do(t, "GET", base+"/ui/api/events/77", "", nil)
	require.Equal(t, http.StatusNotFound, status)
	require.Equal(t, `{"error":"no event 77"}`, body)
}

// Anything off the list is a 404 (or a 405 for another method on a listed path, or a 400 for a
// query parameter the route does not take) and never reaches the API: unknown paths, ids that are
// not digits, dot segments plain and encoded, encoded slashes and backslashes, empty segments.
func TestOffListRequestsNeverReachTheAPI(t *testing.T) {
	t.Parallel()
	fake := &fakeAPI{}
	base := serve(t, Options{API: fake})
	token := session(t, base)["csrfToken"]
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/", 404},
		{"GET", "/admin", 404},
		{"GET", "/events/abc", 404},
		{"GET", "/events/-1", 404},
		{"GET", "/events/1.5", 404},
		{"GET", "/events/12345678901234567890", 404},
		{"GET", "/events/1/attempts/extra", 404},
		{"GET", "/events/1/../../admin", 404},
		{"GET", "/events/..%2f..%2fadmin", 404},
		{"GET", "/references/../events", 404},
		{"GET", "/references/%2e%2e/events", 404},
		{"GET", "/references/./events", 404},
		{"GET", "/references/a%2Fb/events", 404},
		{"GET", "/references/a%5Cb/events", 404},
		{"GET", "/references/a%00b/events", 404},
		{"GET", "/references/a%C2%85b/events", 404}, // U+0085, a C1 control character
		{"GET", "/references//events", 404},
		{"GET", "/agents/", 404},
		{"GET", "//agents", 404},
		{"GET", "/counters/u1/order/extra", 404},
		{"GET", "/http:%2F%2Fevil.example", 404},
		{"GET", "/events%2F1", 404},
		{"DELETE", "/events/1", 405},
		{"PUT", "/events/1/retry", 405},
		{"GET", "/events/1/retry", 405},
		{"POST", "/agents", 405},
		{"POST", "/events", 405},
		{"HEAD", "/agents", 405},
		{"GET", "/agents?x=1", 400},
		{"GET", "/events?state=failed&url=http://evil.example", 400},
		{"GET", "/events/1?state=failed", 400},
	} {
		status, h, body := do(t, c.method, base+"/ui/api"+c.path, "", map[string]string{"X-CSRF-Token": token})
		require.Equal(t, c.status, status, "%s %s: %s", c.method, c.path, body)
		if c.method != "HEAD" {
			require.Contains(t, body, `"error"`, c.path)
		}
		if c.status == 405 {
			require.NotEmpty(t, h.Get("Allow"), c.path)
		}
	}
	require.Empty(t, fake.received(), "nothing off the list reached the API")
}

// Against a deployed API the console signs every call with SigV4 for execute-api, with the
// operator's credentials, and joins the API's path to the stage's. The upstream checks the
// signature by signing the request it received again.
func TestRemoteCallsAreSignedWithSigV4(t *testing.T) {
	t.Parallel()
	fake := &fakeAPI{}
	upstream := httptest.NewServer(fake)
	t.Cleanup(upstream.Close)
	creds := credentials.NewStaticCredentialsProvider("AKIDCONSOLETEST", "secret-for-the-test", "session-token")
	base := serve(t, Options{APIURL: upstream.URL + "/prod/", Credentials: creds, Region: "eu-west-1"})
	s := session(t, base)
	require.Equal(t, "aws", s["mode"])

	status, _, body := do(t, "GET", base+"/ui/api/events/7/attempts", "", nil)
	require.Equal(t, http.StatusOK, status, body)
	status, _, body = do(t, "POST", base+"/ui/api/events/7/retry", "", map[string]string{"X-CSRF-Token": s["csrfToken"]})
	require.Equal(t, http.StatusOK, status, body)

	got := fake.received()
	require.Len(t, got, 2)
	require.Equal(t, "/prod/events/7/attempts", got[0].Path, "the stage's path, then the API's")
	require.Equal(t, "/prod/events/7/retry", got[1].Path)
	emptyHash := sha256.Sum256(nil)
	for _, c := range got {
		auth := c.Header.Get("Authorization")
		date := c.Header.Get("X-Amz-Date")
		require.Regexp(t, `^AWS4-HMAC-SHA256 Credential=AKIDCONSOLETEST/\d{8}/eu-west-1/execute-api/aws4_request, SignedHeaders=\S+, Signature=[0-9a-f]{64}$`, auth)
		require.NotEmpty(t, date)
		require.Equal(t, "session-token", c.Header.Get("X-Amz-Security-Token"))
		require.Equal(t, hex.EncodeToString(emptyHash[:]), c.Header.Get("X-Amz-Content-Sha256"), "the payload hash")
		require.Contains(t, auth, "x-amz-content-sha256", "the payload hash is signed")
		require.Equal(t, auth, resign(t, c, upstream.URL, creds, date), "a valid signature")
	}
}

// resign signs again, with the same credentials and time, the request c the upstream received,
// with the headers its Authorization says were signed, and returns the Authorization it gets.
func resign(t *testing.T, c call, upstreamURL string, creds aws.CredentialsProvider, date string) string {
	t.Helper()
	req, err := http.NewRequest(c.Method, upstreamURL+c.Path, nil)
	require.NoError(t, err)
	auth := c.Header.Get("Authorization")
	signed := auth[strings.Index(auth, "SignedHeaders=")+len("SignedHeaders=") : strings.Index(auth, ", Signature=")]
	for _, name := range strings.Split(signed, ";") {
		if name != "host" {
			req.Header.Set(name, c.Header.Get(name))
		}
	}
	req.Host = c.Host
	at, err := time.Parse("20060102T150405Z", date)
	require.NoError(t, err)
	v, err := creds.Retrieve(context.Background())
	require.NoError(t, err)
	require.NoError(t, v4.NewSigner().SignHTTP(context.Background(), v, req, c.Header.Get("X-Amz-Content-Sha256"), "execute-api", "eu-west-1", at))
	return req.Header.Get("Authorization")
}

// The remote mode takes https only (http to a loopback host, for tests), and needs credentials and a
// region, which an API Gateway URL names.
func TestRemoteConfiguration(t *testing.T) {
	t.Parallel()
	creds := credentials.NewStaticCredentialsProvider("k", "s", "")
	for _, u := range []string{"http://abc.execute-api.eu-west-1.amazonaws.com/prod/", "ftp://127.0.0.1/", "https://user:pw@abc.example/prod/", "https://abc.example/prod/?x=1", "/prod/"} {
		_, err := New(Options{Addr: "127.0.0.1:1", APIURL: u, Credentials: creds, Region: "eu-west-1"})
		require.Error(t, err, u)
	}
	_, err := New(Options{Addr: "127.0.0.1:1", APIURL: "https://abc.execute-api.eu-west-1.amazonaws.com/prod/"})
	require.ErrorContains(t, err, "Credentials")
	_, err = New(Options{Addr: "127.0.0.1:1", APIURL: "https://api.example.com/prod/", Credentials: creds})
	require.ErrorContains(t, err, "names no region")
	_, err = New(Options{Addr: "127.0.0.1:1", APIURL: "https://abc.execute-api.eu-west-1.amazonaws.com/prod/", Credentials: creds})
	require.NoError(t, err)
	require.Equal(t, "eu-west-1", RegionOf("abc.execute-api.eu-west-1.amazonaws.com"))
	require.Equal(t, "cn-north-1", RegionOf("abc.execute-api.cn-north-1.amazonaws.com.cn"))
	require.Empty(t, RegionOf("api.example.com"))
	_, err = New(Options{API: &fakeAPI{}})
	require.ErrorContains(t, err, "Host check")
}

// An API that does not answer, answers something other than JSON, or redirects is a 502 whose
// message says nothing of the failure (no address, no error text, no body of the upstream).
func TestUpstreamFailureIsA502WithNoInternalText(t *testing.T) {
	t.Parallel()
	creds := credentials.NewStaticCredentialsProvider("k", "s", "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now

	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte("<html>stack trace: secret internal detail</html>"))
	}))
	t.Cleanup(html.Close)
	// A redirect elsewhere (here another loopback server standing in for, say, an instance metadata
	// address) is not followed: the console calls the allow-listed paths of the API and nothing else.
	elsewhere := &fakeAPI{}
	target := httptest.NewServer(elsewhere)
	t.Cleanup(target.Close)
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", target.URL+"/latest/meta-data/")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusFound)
		_, _ = w.Write([]byte(`{"moved":true}`))
	}))
	t.Cleanup(redirect.Close)

	for _, up := range []string{down, html.URL, redirect.URL} {
		base := serve(t, Options{APIURL: up + "/prod/", Credentials: creds, Region: "eu-west-1"})
		status, _, body := do(t, "GET", base+"/ui/api/agents", "", nil)
		require.Equal(t, http.StatusBadGateway, status, up)
		require.JSONEq(t, `{"error":"the API did not answer; the console's log says why"}`, body, up)
	}
	require.Empty(t, elsewhere.received(), "the redirect was not followed")
}

// With the real API's handler in-process, on a scratch database: the console shows its agents, and
// its 404 for an event that does not exist.
func TestWithTheRealAPI(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	_, err := store.Agents.RegisterAgent(context.Background(), exactlyonce.AgentSpec{Name: "console-test-agent", Kind: "standalone",
		Sharding: exactlyonce.ShardingDynamic}, time.Minute)
	require.NoError(t, err)
	base := serve(t, Options{API: openapitest.Handler(t, &api.Server{Stores: store.API()})})

	status, _, body := do(t, "GET", base+"/ui/api/agents", "", nil)
	require.Equal(t, http.StatusOK, status, body)
	var got struct {
		Agents []struct {
			Name string `json:"name"`
		} `json:"agents"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &got))
	require.Len(t, got.Agents, 1)
	require.Equal(t, "console-test-agent", got.Agents[0].Name)

	status, _, body = do(t, "GET", base+"/ui/api/events/987654321", "", nil)
	require.Equal(t, http.StatusNotFound, status, body)
	require.Contains(t, body, `"error"`)
}

// Against a deployed API, a caller without the right credentials is refused by API Gateway itself,
// which answers in its own shape, {"message": ...} (or {"Message": ...} for an explicit deny), not
// the API's {"error": ...}: the console passes the status on with the refusal in its own shape, so
// that the page says why (it shows an answer's "error", else only "HTTP 403"). Credentials that
// cannot be read (expired, none) are said as such, not as an API that did not answer.
func TestAPIGatewayRefusalsAreShown(t *testing.T) {
	t.Parallel()
	creds := credentials.NewStaticCredentialsProvider("k", "s", "")
	const denied = "User: arn:aws:sts::123456789012:assumed-role/operator/me is not authorized to perform: execute-api:Invoke on resource: arn:aws:execute-api:eu-west-1:123456789012:abc/prod/GET/agents"
	for _, c := range []struct {
		status int
		body   string
		want   string
	}{
		{http.StatusForbidden, `{"message":"` + denied + `"}`, denied},
		{http.StatusForbidden, `{"Message":"` + denied + ` with an explicit deny"}`, denied + " with an explicit deny"},
		{http.StatusForbidden, `{"message":"The security token included in the request is expired"}`, "The security token included in the request is expired"},
		{http.StatusTooManyRequests, `{"message":"Too Many Requests"}`, "Too Many Requests"},
		{http.StatusGatewayTimeout, `{"message": "Endpoint request timed out"}`, "Endpoint request timed out"},
	} {
		fake := &fakeAPI{status: c.status, body: c.body}
		upstream := httptest.NewServer(fake)
		t.Cleanup(upstream.Close)
		base := serve(t, Options{APIURL: upstream.URL + "/prod/", Credentials: creds, Region: "eu-west-1"})
		status, _, body := do(t, "GET", base+"/ui/api/agents", "", nil)
		require.Equal(t, c.status, status, body)
		var got map[string]string
		require.NoError(t, json.Unmarshal([]byte(body), &got), body)
		require.Contains(t, got["error"], "API Gateway refused the call", body)
		require.Contains(t, got["error"], c.want, body)
		if c.status == http.StatusForbidden {
			require.Contains(t, got["error"], "execute-api:Invoke", "what the identity needs: %s", body)
		}
	}

	// The API's own errors pass as they are.
	fake := &fakeAPI{status: http.StatusNotFound, body: `{"error":"event 7 not found"}`}
	upstream := httptest.NewServer(fake)
	t.Cleanup(upstream.Close)
	base := serve(t, Options{APIURL: upstream.URL + "/prod/", Credentials: creds, Region: "eu-west-1"})
	status, _, body := do(t, "GET", base+"/ui/api/events/7", "", nil)
	require.Equal(t, http.StatusNotFound, status)
	require.Equal(t, `{"error":"event 7 not found"}`, body)

	// Credentials that cannot be read: nothing is sent, and the answer says so.
	expired := aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{}, errors.New("the SSO session has expired: secret detail")
	})
	base = serve(t, Options{APIURL: upstream.URL + "/prod/", Credentials: expired, Region: "eu-west-1"})
	before := len(fake.received())
	status, _, body = do(t, "GET", base+"/ui/api/agents", "", nil)
	require.Equal(t, http.StatusBadGateway, status)
	require.JSONEq(t, `{"error":"the console could not sign the call: your AWS credentials could not be read (expired?); the console's log says why"}`, body)
	require.Len(t, fake.received(), before, "nothing reached the API")
}

// A retry whose answer is lost (the API took the request and the connection closed, or API Gateway
// answered 504 because the integration timed out) may have been applied: the 502 or 504 says so,
// and to read the task before retrying again, rather than that the API did not answer, which the
// page showed as "Retry of 7 refused" and invited a second retry. The console sends it once. A read
// keeps its message.
func TestALostRetryAnswerSaysTheOutcomeIsUnknown(t *testing.T) {
	t.Parallel()
	creds := credentials.NewStaticCredentialsProvider("k", "s", "")
	var mu sync.Mutex
	var got []string
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path)
		mu.Unlock()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close() // taken, never answered
		}
	}))
	t.Cleanup(cut.Close)
	base := serve(t, Options{APIURL: cut.URL + "/prod/", Credentials: creds, Region: "eu-west-1"})
	token := session(t, base)["csrfToken"]
	for _, p := range []string{"/events/7/retry", "/references/order-7/retry"} {
		status, _, body := do(t, "POST", base+"/ui/api"+p, "", map[string]string{"X-CSRF-Token": token})
		require.Equal(t, http.StatusBadGateway, status, body)
		require.Contains(t, body, "may have been applied", p)
		require.Contains(t, body, "before retrying again", p)
	}
	status, _, body := do(t, "GET", base+"/ui/api/agents", "", nil)
	require.Equal(t, http.StatusBadGateway, status)
	require.JSONEq(t, `{"error":"the API did not answer; the console's log says why"}`, body)
	mu.Lock()
	require.Equal(t, []string{"POST /prod/events/7/retry", "POST /prod/references/order-7/retry", "GET /prod/agents"}, got, "each sent once")
	mu.Unlock()

	timedOut := &fakeAPI{status: http.StatusGatewayTimeout, body: `{"message": "Endpoint request timed out"}`}
	gw := httptest.NewServer(timedOut)
	t.Cleanup(gw.Close)
	base = serve(t, Options{APIURL: gw.URL + "/prod/", Credentials: creds, Region: "eu-west-1"})
	token = session(t, base)["csrfToken"]
	status, _, body = do(t, "POST", base+"/ui/api/events/7/retry", "", map[string]string{"X-CSRF-Token": token})
	require.Equal(t, http.StatusGatewayTimeout, status, body)
	require.Contains(t, body, "Endpoint request timed out")
	require.Contains(t, body, "may have been applied")
	status, _, body = do(t, "GET", base+"/ui/api/agents", "", nil)
	require.Equal(t, http.StatusGatewayTimeout, status, body)
	require.NotContains(t, body, "applied")
}
