package console

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/stretchr/testify/require"
)

// fakeCloudWatch stands in for CloudWatch's endpoint (the awsQuery protocol: a form in, XML out):
// it records each request's form and answers the next of answers (status, body), the last one
// again when they run out.
type fakeCloudWatch struct {
	mu      sync.Mutex
	forms   []url.Values
	auth    []string
	answers [][2]string   // status code, body
	stall   chan struct{} // if set, a request is answered only once it is closed (or the caller gives up)
}

func (f *fakeCloudWatch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body) // read first: the server then sees a caller that goes away (r.Context)
	if f.stall != nil {
		select {
		case <-f.stall:
		case <-r.Context().Done():
			return
		}
	}
	form, err := url.ParseQuery(string(b))
	if err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.forms = append(f.forms, form)
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	a := f.answers[min(len(f.forms), len(f.answers))-1]
	f.mu.Unlock()
	var status int
	fmt.Sscan(a[0], &status)
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, a[1])
}

func (f *fakeCloudWatch) received() ([]url.Values, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]url.Values(nil), f.forms...), append([]string(nil), f.auth...)
}

// cloudWatchClient is a CloudWatch client of the stand-in served on loopback, signing with static
// credentials, retrying nothing.
func cloudWatchClient(t *testing.T, f *fakeCloudWatch) *cloudwatch.Client {
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return cloudwatch.New(cloudwatch.Options{Region: "eu-west-1", BaseEndpoint: aws.String(srv.URL),
		Credentials:      credentials.NewStaticCredentialsProvider("AKIDTEST", "SECRET", ""),
		RetryMaxAttempts: 1})
}

// metricDataAnswer is a GetMetricData answer holding results (XML members) and a next token.
func metricDataAnswer(next string, results ...string) [2]string {
	token := ""
	if next != "" {
		token = "<NextToken>" + next + "</NextToken>"
	}
	return [2]string{"200", `<GetMetricDataResponse xmlns="http://monitoring.amazonaws.com/doc/2010-08-01/">
  <GetMetricDataResult><MetricDataResults>` + strings.Join(results, "") + `</MetricDataResults><Messages/>` + token + `</GetMetricDataResult>
  <ResponseMetadata><RequestId>req-1</RequestId></ResponseMetadata>
</GetMetricDataResponse>`}
}

// result is one MetricDataResults member: the sums of query id at the minutes before 03:04.
func result(id string, sums ...float64) string {
	var ts, vs strings.Builder
	for i, v := range sums {
		fmt.Fprintf(&ts, "<member>2026-01-02T03:%02d:00Z</member>", 3-len(sums)+i)
		fmt.Fprintf(&vs, "<member>%g</member>", v)
	}
	return "<member><Id>" + id + "</Id><Label>" + id + "</Label><StatusCode>Complete</StatusCode><Timestamps>" + ts.String() +
		"</Timestamps><Values>" + vs.String() + "</Values></member>"
}

// The CloudWatch source's request, seen by a stand-in for the endpoint: one GetMetricData, signed
// for the service "monitoring", with a query per configured function (namespace ExactlyOnce,
// EventsCreatedSync for the api function, EventsProcessed for the processor and the sweeper, the
// dimension FunctionName, Sum per 60 s) over the last five whole minutes, following the next token;
// the answer's sums become rates over 300 s, the agent's path not measured.
func TestCloudWatchRatesRequestAndAnswer(t *testing.T) {
	t.Parallel()
	f := &fakeCloudWatch{answers: [][2]string{
		metricDataAnswer("page-2", result("api", 60, 120), result("processor", 300)),
		metricDataAnswer("", result("processor", 600, 600), result("sweeper", 30)),
	}}
	src, err := NewCloudWatchRates(cloudWatchClient(t, f), map[string]string{
		PathAPI: "ExactlyOnce-ApiFunction-abc", PathProcessor: "ExactlyOnce-ProcessorFunction-def", PathSweeper: "ExactlyOnce-SweeperFunction-ghi"})
	require.NoError(t, err)
	src.now = func() time.Time { return time.Date(2026, 1, 2, 3, 4, 35, 0, time.UTC) }
	base := serve(t, Options{API: &fakeAPI{}, Rates: src})

	source, window, rates, notMeasured, unavailable := getRates(t, base)
	require.Empty(t, unavailable)
	require.Equal(t, "cloudwatch", source)
	require.Equal(t, 300.0, window)
	require.Equal(t, map[string]float64{PathAPI: 0.6, PathProcessor: 5, PathSweeper: 0.1, PathAgent: 0}, rates)
	require.Equal(t, []string{PathAgent}, notMeasured)

	forms, auth := f.received()
	require.Len(t, forms, 2, "two pages")
	for i, form := range forms {
		require.Contains(t, auth[i], "/eu-west-1/monitoring/aws4_request", "signed for CloudWatch")
		want := url.Values{"Action": {"GetMetricData"}, "Version": {"2010-08-01"}, "StartTime": {"2026-01-02T02:59:00Z"},
			"EndTime": {"2026-01-02T03:04:00Z"}, "ScanBy": {"TimestampAscending"}}
		for n, q := range []struct{ id, metric, function string }{
			{"api", "EventsCreatedSync", "ExactlyOnce-ApiFunction-abc"},
			{"processor", "EventsProcessed", "ExactlyOnce-ProcessorFunction-def"},
			{"sweeper", "EventsProcessed", "ExactlyOnce-SweeperFunction-ghi"},
		} {
			p := fmt.Sprintf("MetricDataQueries.member.%d.", n+1)
			want[p+"Id"] = []string{q.id}
			want[p+"ReturnData"] = []string{"true"}
			want[p+"MetricStat.Metric.Namespace"] = []string{"ExactlyOnce"}
			want[p+"MetricStat.Metric.MetricName"] = []string{q.metric}
			want[p+"MetricStat.Metric.Dimensions.member.1.Name"] = []string{"FunctionName"}
			want[p+"MetricStat.Metric.Dimensions.member.1.Value"] = []string{q.function}
			want[p+"MetricStat.Period"] = []string{"60"}
			want[p+"MetricStat.Stat"] = []string{"Sum"}
		}
		if i == 1 {
			want["NextToken"] = []string{"page-2"}
		}
		require.Equal(t, want, form, "request %d", i+1)
	}
}

// What CloudWatch refuses or fails at: a refusal (IAM) names the action the credentials need, a
// failure says only that the rates could not be read (the error is logged), no function names say
// which variable to set. Each a 200 with "unavailable".
func TestCloudWatchRatesUnavailable(t *testing.T) {
	t.Parallel()
	denied := [2]string{"403", `<ErrorResponse xmlns="http://monitoring.amazonaws.com/doc/2010-08-01/"><Error><Type>Sender</Type>` +
		`<Code>AccessDenied</Code><Message>User: arn:aws:iam::123456789012:user/op is not authorized to perform: cloudwatch:GetMetricData</Message>` +
		`</Error><RequestId>req-2</RequestId></ErrorResponse>`}
	failed := [2]string{"500", `<ErrorResponse><Error><Type>Receiver</Type><Code>InternalServiceError</Code><Message>secret detail</Message></Error></ErrorResponse>`}
	forbidden := metricDataAnswer("", strings.Replace(result("processor", 5), "Complete", "Forbidden", 1))
	for _, c := range []struct {
		name      string
		answer    [2]string
		functions map[string]string
		want      string
	}{
		{"access denied", denied, map[string]string{PathProcessor: "p"}, "CloudWatch refused to give the metrics: the console's AWS credentials need the IAM action cloudwatch:GetMetricData"},
		{"a query forbidden", forbidden, map[string]string{PathProcessor: "p"}, "CloudWatch refused to give the metrics of the processor function: the console's AWS credentials need the IAM action cloudwatch:GetMetricData"},
		{"server error", failed, map[string]string{PathProcessor: "p"}, "the rates could not be read; the console's log says why"},
		{"no functions", denied, nil, "the names of the stack's functions are not configured: set FUNCTIONS=api=<name>,processor=<name>,sweeper=<name> (make ui)"},
	} {
		f := &fakeCloudWatch{answers: [][2]string{c.answer}}
		src, err := NewCloudWatchRates(cloudWatchClient(t, f), c.functions)
		require.NoError(t, err)
		base := serve(t, Options{API: &fakeAPI{}, Rates: src})
		source, window, rates, _, unavailable := getRates(t, base)
		require.Equal(t, c.want, unavailable, c.name)
		require.Equal(t, "cloudwatch", source, c.name)
		require.Zero(t, window, c.name)
		for p, v := range rates {
			require.Zero(t, v, "%s: %s", c.name, p)
		}
		if forms, _ := f.received(); c.functions == nil {
			require.Empty(t, forms, "nothing to ask CloudWatch")
		}
	}
}

// A CloudWatch that does not answer gives a 200 with zero rates and unavailable within
// Options.AWSTimeout, as one that fails does: the overview waits for its rates with its counts and
// queues (one Promise.all), so a rates call that waited as long as the page did stopped the overview
// from refreshing at all.
func TestCloudWatchRatesStalled(t *testing.T) {
	t.Parallel()
	f := &fakeCloudWatch{answers: [][2]string{metricDataAnswer("", result("processor", 5))}, stall: make(chan struct{})}
	var once sync.Once
	answer := func() { once.Do(func() { close(f.stall) }) }
	client := cloudWatchClient(t, f)
	t.Cleanup(answer) // before the stand-in's Close, which waits for its stalled handler
	src, err := NewCloudWatchRates(client, map[string]string{PathProcessor: "p"})
	require.NoError(t, err)
	base := serve(t, Options{API: &fakeAPI{}, Rates: src, AWSTimeout: time.Second})
	type result struct {
		status int
		body   string
		err    error
	}
	got := make(chan result, 1)
	start := time.Now()
	go func() {
		resp, err := http.Get(base + "/ui/api/rates")
		if err != nil {
			got <- result{err: err}
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- result{status: resp.StatusCode, body: string(body)}
	}()
	select {
	case r := <-got:
		require.NoError(t, r.err)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Contains(t, r.body, `"unavailable":"the rates could not be read; the console's log says why"`)
		require.Less(t, time.Since(start), 10*time.Second)
	case <-time.After(15 * time.Second):
		answer() // lets the stalled call end
		t.Fatal("GET /ui/api/rates still waits for the stalled CloudWatch after 15 s (AWSTimeout 1 s)")
	}
}

// The function names are checked when the source is made.
func TestNewCloudWatchRatesRefusesUnknownPaths(t *testing.T) {
	t.Parallel()
	_, err := NewCloudWatchRates(nil, map[string]string{PathAgent: "x"})
	require.ErrorContains(t, err, `unknown path "agent"`)
	_, err = NewCloudWatchRates(nil, map[string]string{PathAPI: ""})
	require.ErrorContains(t, err, "the api function's name is empty")
}
