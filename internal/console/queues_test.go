package console

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/stretchr/testify/require"
)

type queuesAnswer struct {
	Queues []struct {
		Name, URL                  string
		Visible, InFlight, Delayed int
		DLQ                        *struct {
			Name, URL         string
			Visible, InFlight int
		}
	}
}

func send(t *testing.T, client *sqs.Client, url string, bodies ...string) {
	t.Helper()
	for _, b := range bodies {
		_, err := client.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(b)})
		require.NoError(t, err)
	}
}

func nameOf(url string) string { return url[strings.LastIndex(url, "/")+1:] }

// The queues' depths, against local SQS: each configured source queue (by name or URL) with the DLQ
// its RedrivePolicy names. A dry run lists the DLQ's messages and changes nothing; a redrive then
// moves them all to the source queue.
func TestQueuesDepthsDryRunAndRedrive(t *testing.T) {
	t.Parallel()
	client := localsqs.Client(t)
	a := localsqs.Queues(t, client, 30, 5)
	b := localsqs.Queues(t, client, 30, 5)
	send(t, client, a.URL, `{"id":1}`)
	send(t, client, a.DLQURL, `{"id":2}`, `{"id":3}`, `not json`)
	send(t, client, b.DLQURL, `{"id":9}`)
	base := serve(t, Options{API: &fakeAPI{}, SQS: client, Queues: []string{nameOf(a.URL), b.URL}})
	token := session(t, base)["csrfToken"]

	depths := func() queuesAnswer {
		t.Helper()
		status, h, body := do(t, "GET", base+"/ui/api/queues", "", nil)
		require.Equal(t, http.StatusOK, status, body)
		require.Equal(t, "no-store", h.Get("Cache-Control"))
		var got queuesAnswer
		require.NoError(t, json.Unmarshal([]byte(body), &got))
		return got
	}
	got := depths()
	require.Len(t, got.Queues, 2)
	qa, qb := got.Queues[0], got.Queues[1]
	require.Equal(t, nameOf(a.URL), qa.Name)
	require.Equal(t, a.URL, qa.URL)
	require.Equal(t, 1, qa.Visible+qa.InFlight)
	require.NotNil(t, qa.DLQ)
	require.Equal(t, nameOf(a.DLQURL), qa.DLQ.Name)
	require.Equal(t, a.DLQURL, qa.DLQ.URL)
	require.Equal(t, 3, qa.DLQ.Visible)
	require.Equal(t, nameOf(b.URL), qb.Name, "a URL's queue is named by its last segment")
	require.Equal(t, 1, qb.DLQ.Visible)

	redrive := func(name, body string) (int, string) {
		t.Helper()
		status, _, answer := do(t, "POST", base+"/ui/api/queues/"+name+"/redrive", body, map[string]string{"X-CSRF-Token": token})
		return status, answer
	}
	status, body := redrive(qa.Name, `{"dryRun": true}`)
	require.Equal(t, http.StatusOK, status, body)
	var dry struct {
		DryRun   bool     `json:"dryRun"`
		Messages int      `json:"messages"`
		Sample   []string `json:"sample"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &dry))
	require.True(t, dry.DryRun)
	require.Equal(t, 3, dry.Messages)
	require.ElementsMatch(t, []string{`{"id":2}`, `{"id":3}`, `not json`}, dry.Sample)
	requireDepth(t, client, a.URL, 1)
	requireDepth(t, client, a.DLQURL, 3)

	status, body = redrive(qa.Name, `{"dryRun": false}`)
	require.Equal(t, http.StatusOK, status, body)
	require.JSONEq(t, `{"dryRun": false, "moved": 3}`, body)
	requireDepth(t, client, a.URL, 4)
	requireDepth(t, client, a.DLQURL, 0)
	requireDepth(t, client, b.DLQURL, 1)
	got = depths()
	require.Zero(t, got.Queues[0].DLQ.Visible)
}

// A message is counted once: visible until it is received, then in flight until it is deleted or
// its visibility timeout ends, as SQS counts them (ApproximateNumberOfMessages is the visible ones
// only). goaws counted every message it held as visible, so two received messages showed as 2
// visible and 2 in flight; tools/sqslocal answers as SQS does.
func TestQueueDepthsCountEachMessageOnce(t *testing.T) {
	t.Parallel()
	client := localsqs.Client(t)
	q := localsqs.Queues(t, client, 30, 5)
	send(t, client, q.URL, `{"id":1}`, `{"id":2}`, `{"id":3}`)
	base := serve(t, Options{API: &fakeAPI{}, SQS: client, Queues: []string{q.URL}})
	depth := func() (visible, inFlight int) {
		t.Helper()
		status, _, body := do(t, "GET", base+"/ui/api/queues", "", nil)
		require.Equal(t, http.StatusOK, status, body)
		var got queuesAnswer
		require.NoError(t, json.Unmarshal([]byte(body), &got))
		require.Len(t, got.Queues, 1)
		return got.Queues[0].Visible, got.Queues[0].InFlight
	}
	visible, inFlight := depth()
	require.Equal(t, [2]int{3, 0}, [2]int{visible, inFlight}, "sent: visible")

	received := 0
	for received < 2 { // a receive may answer fewer than asked
		out, err := client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL),
			MaxNumberOfMessages: int32(2 - received)})
		require.NoError(t, err)
		received += len(out.Messages)
	}
	visible, inFlight = depth()
	require.Equal(t, [2]int{1, 2}, [2]int{visible, inFlight}, "two received: in flight, and no longer visible")
}

// A redrive is a POST of a configured queue with {"dryRun": bool} and the CSRF token; anything
// else is refused and moves nothing.
func TestRedriveRefusals(t *testing.T) {
	t.Parallel()
	client := localsqs.Client(t)
	a := localsqs.Queues(t, client, 30, 5)
	send(t, client, a.DLQURL, `{"id":2}`)
	base := serve(t, Options{API: &fakeAPI{}, SQS: client, Queues: []string{a.URL}})
	token := session(t, base)["csrfToken"]
	name := nameOf(a.URL)
	for _, c := range []struct {
		name, method, path, body string
		headers                  map[string]string
		status                   int
	}{
		{"no token", "POST", name, `{"dryRun": false}`, nil, 403},
		{"wrong token", "POST", name, `{"dryRun": false}`, map[string]string{"X-CSRF-Token": "x"}, 403},
		{"cross-site", "POST", name, `{"dryRun": false}`, map[string]string{"X-CSRF-Token": token, "Sec-Fetch-Site": "cross-site"}, 403},
		{"foreign origin", "POST", name, `{"dryRun": false}`, map[string]string{"X-CSRF-Token": token, "Origin": "https://evil.example"}, 403},
		{"unconfigured queue", "POST", nameOf(a.DLQURL), `{"dryRun": false}`, map[string]string{"X-CSRF-Token": token}, 404},
		{"GET", "GET", name, "", map[string]string{"X-CSRF-Token": token}, 405},
		{"no body", "POST", name, ``, map[string]string{"X-CSRF-Token": token}, 400},
		{"no dryRun", "POST", name, `{}`, map[string]string{"X-CSRF-Token": token}, 400},
		{"dryRun not a bool", "POST", name, `{"dryRun": "no"}`, map[string]string{"X-CSRF-Token": token}, 400},
		{"unknown field", "POST", name, `{"dryRun": false, "dlq": "other"}`, map[string]string{"X-CSRF-Token": token}, 400},
		{"two values", "POST", name, `{"dryRun": true} {"dryRun": false}`, map[string]string{"X-CSRF-Token": token}, 400},
		// One rule for every body (8): a field given twice, or in another case, is
		// refused; encoding/json would let the last win, or match "DryRun" to dryRun.
		{"dryRun twice", "POST", name, `{"dryRun": true, "dryRun": false}`, map[string]string{"X-CSRF-Token": token}, 400},
		{"DryRun", "POST", name, `{"DryRun": false}`, map[string]string{"X-CSRF-Token": token}, 400},
	} {
		status, _, body := do(t, c.method, base+"/ui/api/queues/"+c.path+"/redrive", c.body, c.headers)
		require.Equal(t, c.status, status, "%s: %s", c.name, body)
		require.Contains(t, body, `"error"`)
	}
	// A query parameter is refused, as on every other route of the console's API, before anything
	// moves: ignored, ?dryRun=true beside a body that says false ran a real redrive.
	for _, q := range []string{"?dryRun=true", "?x=1"} {
		status, _, body := do(t, "POST", base+"/ui/api/queues/"+name+"/redrive"+q, `{"dryRun": false}`, map[string]string{"X-CSRF-Token": token})
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", q, body)
		require.Contains(t, body, "takes no query parameters", q)
	}
	requireDepth(t, client, a.DLQURL, 1)
	requireDepth(t, client, a.URL, 0)
}

func requireDepth(t *testing.T, client *sqs.Client, url string, want int) {
	t.Helper()
	v, inFlight, err := queue.Depth(context.Background(), client, url)
	require.NoError(t, err)
	require.Equal(t, want, v+inFlight, url)
}

// An SQS endpoint that stops answering (its process stopped with SIGSTOP: connections accepted,
// nothing answered) makes the queues' depths and a dry run a 502 within Options.AWSTimeout, not a
// request that waits for as long as the page does (the overview asks again every 2 s); the endpoint
// resumed, both answer again.
func TestAStalledSQSIsA502WithinTheTimeout(t *testing.T) {
	t.Parallel()
	srv, err := localsqs.Start("")
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	client := localsqs.NewClient(srv.URL)
	a := localsqs.Queues(t, client, 30, 5)
	send(t, client, a.DLQURL, `{"id":7}`)
	base := serve(t, Options{API: &fakeAPI{}, SQS: client, Queues: []string{a.URL}, AWSTimeout: time.Second})
	token := session(t, base)["csrfToken"]
	name := nameOf(a.URL)

	require.NoError(t, srv.Pause())
	t.Cleanup(func() { _ = srv.Resume() })
	patient := &http.Client{Timeout: 15 * time.Second}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/ui/api/queues", ""},
		{"POST", "/ui/api/queues/" + name + "/redrive", `{"dryRun": true}`},
	} {
		req, err := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
		require.NoError(t, err)
		req.Header.Set("X-CSRF-Token", token)
		start := time.Now()
		resp, err := patient.Do(req)
		require.NoError(t, err, "%s %s: still waiting for the stalled SQS endpoint after 15 s (AWSTimeout 1 s)", c.method, c.path)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusBadGateway, resp.StatusCode, "%s %s: %s", c.method, c.path, body)
		require.Contains(t, string(body), "the console's log says why")
		require.Less(t, time.Since(start), 10*time.Second)
	}

	require.NoError(t, srv.Resume())
	status, _, body := do(t, "GET", base+"/ui/api/queues", "", nil)
	require.Equal(t, http.StatusOK, status, body)
	status, _, body = do(t, "POST", base+"/ui/api/queues/"+name+"/redrive", `{"dryRun": true}`, map[string]string{"X-CSRF-Token": token})
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `"messages":1`)
}

// A DLQ that is the dead-letter queue of another queue too holds that queue's messages: the
// console's dry run and redrive are refused with a 409 naming the problem (redrive.CheckSources, the
// check cmd/redrive makes), and no message moves.
func TestRedriveOfASharedDLQIsRefused(t *testing.T) {
	t.Parallel()
	client := localsqs.Client(t)
	a := localsqs.Queues(t, client, 30, 5)
	also, err := client.CreateQueue(context.Background(), &sqs.CreateQueueInput{
		QueueName:  aws.String(nameOf(a.URL) + "-also"),
		Attributes: map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"` + a.DLQARN + `","maxReceiveCount":5}`},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: also.QueueUrl})
	})
	send(t, client, a.DLQURL, `{"id":2}`)
	base := serve(t, Options{API: &fakeAPI{}, SQS: client, Queues: []string{a.URL}})
	token := session(t, base)["csrfToken"]
	for _, body := range []string{`{"dryRun": true}`, `{"dryRun": false}`} {
		status, _, answer := do(t, "POST", base+"/ui/api/queues/"+nameOf(a.URL)+"/redrive", body, map[string]string{"X-CSRF-Token": token})
		require.Equal(t, http.StatusConflict, status, "%s: %s", body, answer)
		require.Contains(t, answer, "refused before anything moved", body)
		require.Contains(t, answer, "dead-letter queue of other queues too", body)
		requireDepth(t, client, a.DLQURL, 1)
		requireDepth(t, client, a.URL, 0)
		requireDepth(t, client, aws.ToString(also.QueueUrl), 0)
	}
}

// A redrive whose credentials lack a permission it needs is a 403 that says so, not a 502 "failed"
// logged at ERROR: here SQS refuses ListDeadLetterSourceQueues (as AWS does a role without it), the
// one action the redrive's checks added, through a proxy in front of the local endpoint.
func TestRedriveDeniedByIAMIsA403(t *testing.T) {
	t.Parallel()
	target, err := url.Parse(localsqs.Endpoint(t))
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	deny := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Amz-Target") == "AmazonSQS.ListDeadLetterSourceQueues" {
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.Header().Set("x-amzn-query-error", "AccessDenied;Sender")
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `{"__type":"com.amazonaws.sqs#AccessDenied","message":"User: arn:aws:iam::123456789012:user/op is not authorized to perform: sqs:ListDeadLetterSourceQueues"}`)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(deny.Close)
	client := localsqs.NewClient(deny.URL)
	a := localsqs.Queues(t, localsqs.Client(t), 30, 5)
	send(t, client, a.DLQURL, `{"id":2}`)
	base := serve(t, Options{API: &fakeAPI{}, SQS: client, Queues: []string{a.URL}})
	token := session(t, base)["csrfToken"]
	for _, body := range []string{`{"dryRun": true}`, `{"dryRun": false}`} {
		status, _, answer := do(t, "POST", base+"/ui/api/queues/"+nameOf(a.URL)+"/redrive", body, map[string]string{"X-CSRF-Token": token})
		require.Equal(t, http.StatusForbidden, status, "%s: %s", body, answer)
		require.Contains(t, answer, "sqs:ListDeadLetterSourceQueues", body)
		requireDepth(t, client, a.DLQURL, 1)
	}
}

// A redrive's body over its limit (1 KiB) is a 413 that says so, even when it is a valid
// {"dryRun": false} padded with spaces: before, it was a 400 saying the body must be
// {"dryRun": ...}, which it was. Nothing moves.
func TestRedriveBodyOverTheLimitIsA413(t *testing.T) {
	t.Parallel()
	client := localsqs.Client(t)
	a := localsqs.Queues(t, client, 30, 5)
	send(t, client, a.DLQURL, `{"id":2}`)
	base := serve(t, Options{API: &fakeAPI{}, SQS: client, Queues: []string{a.URL}})
	token := session(t, base)["csrfToken"]
	for _, body := range []string{`{"dryRun": false}` + strings.Repeat(" ", 2000), `{"dryRun": "` + strings.Repeat("x", 1<<20) + `"}`} {
		status, _, answer := do(t, "POST", base+"/ui/api/queues/"+nameOf(a.URL)+"/redrive", body, map[string]string{"X-CSRF-Token": token})
		require.Equal(t, http.StatusRequestEntityTooLarge, status, answer)
		require.JSONEq(t, `{"error":"the body is over 1024 bytes: a redrive's is {\"dryRun\": true} or {\"dryRun\": false}"}`, answer)
	}
	requireDepth(t, client, a.DLQURL, 1)
	requireDepth(t, client, a.URL, 0)
}

// Two redrives of a queue at once (a double click, two operators): the second is a 409 saying one
// is running, while the first is held inside its calls to SQS; the first moves each message once.
func TestConcurrentRedrivesRunOnce(t *testing.T) {
	t.Parallel()
	srv, err := localsqs.Start("")
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	a := localsqs.Queues(t, localsqs.NewClient(srv.URL), 30, 5)
	send(t, localsqs.NewClient(srv.URL), a.DLQURL, `{"id":1}`, `{"id":2}`)
	target, err := url.Parse(srv.URL)
	require.NoError(t, err)
	forward := httputil.NewSingleHostReverseProxy(target)
	entered, release := make(chan struct{}), make(chan struct{})
	var once atomicOnce
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if once.first() {
			close(entered)
			<-release
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(gate.Close)
	client := localsqs.NewClient(gate.URL)
	base := serve(t, Options{API: &fakeAPI{}, SQS: client, Queues: []string{a.URL}, AWSTimeout: time.Minute})
	token := session(t, base)["csrfToken"]
	path := base + "/ui/api/queues/" + nameOf(a.URL) + "/redrive"
	first := make(chan [2]string, 1)
	go func() {
		req, _ := http.NewRequest("POST", path, strings.NewReader(`{"dryRun": false}`))
		req.Header.Set("X-CSRF-Token", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- [2]string{"0", err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		first <- [2]string{resp.Status, string(b)}
	}()
	<-entered
	for _, body := range []string{`{"dryRun": false}`, `{"dryRun": true}`} {
		status, _, answer := do(t, "POST", path, body, map[string]string{"X-CSRF-Token": token})
		require.Equal(t, http.StatusConflict, status, answer)
		require.Contains(t, answer, "is already running")
	}
	close(release)
	got := <-first
	require.Equal(t, "200 OK", got[0], got[1])
	require.JSONEq(t, `{"dryRun": false, "moved": 2}`, got[1])
	requireDepth(t, localsqs.NewClient(srv.URL), a.URL, 2)
	requireDepth(t, localsqs.NewClient(srv.URL), a.DLQURL, 0)
}

// atomicOnce says true to the first caller of first only.
type atomicOnce struct{ done atomic.Bool }

func (o *atomicOnce) first() bool { return o.done.CompareAndSwap(false, true) }
