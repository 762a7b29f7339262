package browser_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/local"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/testutil"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// system is a whole local system with the console, and what the test drives it with.
type system struct {
	url     string // the API's base URL; the console is at url + "/ui/"
	dsn     string
	db      *sql.DB // the system's database, for seeding what the API cannot create
	client  *sqs.Client
	events  queue.Queues
	counts  string // the counters queue's URL
	failing atomic.Bool
	hook    string // the webhook receiver's URL
}

func startSystem(t *testing.T) *system {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := localsqs.Start("") // an endpoint of its own: the counter service's queues have fixed names
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	s := &system{client: localsqs.NewClient(srv.URL)}
	db, dsn := testdb.DB(t, 20)
	s.dsn, s.db = dsn, db
	store, err := wire.StoresOn(db, mysql.Config{})
	require.NoError(t, err)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	awsCfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("local", "local", "")}
	counters, err := local.EnsureCounters(ctx, s.client, awsCfg, srv.URL, log)
	require.NoError(t, err)
	s.counts = counters.Queues.URL
	s.events, err = queue.Ensure(ctx, s.client, queue.QueueSpec{Name: "events", VisibilityTimeout: 30, MaxReceiveCount: 5})
	require.NoError(t, err)

	// The webhook receiver: a task whose payload says "bad" gets a 400 (a permanent failure) while
	// failing is set; everything else a 200.
	s.failing.Store(true)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"bad"`)) && s.failing.Load() {
			http.Error(w, "refused on purpose", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(recv.Close)
	s.hook = recv.URL

	tasks := &processing.Tasks{Deliverer: webhook.New(webhook.Config{Key: []byte("console-browser-test-signing-key-0123456789"),
		AllowLoopback: true, Timeout: 5 * time.Second}), RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond}
	sys, err := local.Start(ctx, store, s.client, local.Options{HTTPAddr: "127.0.0.1:0", WrapAPI: func(h http.Handler) http.Handler { return openapitest.Handler(t, h) }, Queues: s.events, Counters: counters,
		SweepInterval: 100 * time.Millisecond, Engine: processing.Engine{Tasks: tasks}, Sweep: sweeping.Config{Logger: log}, Webhook: webhook.Policy{AllowLoopback: true},
		Agent: agents.Config{Member: agents.MemberConfig{Name: "local-sweeper", PulseInterval: 200 * time.Millisecond,
			// Only the doomed agent's expiration (1 s) is under test: the local sweeper outlives a
			// pulse that a loaded machine held up, so that the doomed agent never ejects it.
			Expiration: 30 * time.Second}, PollInterval: 100 * time.Millisecond}}, log)
	require.NoError(t, err)
	t.Cleanup(func() {
		cancel()
		require.NoError(t, sys.Wait())
	})
	s.url = sys.URL
	return s
}

// post sends a create to the API and returns the new event's id.
func (s *system) post(t *testing.T, path, body string) int64 {
	t.Helper()
	resp, err := http.Post(s.url+path, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct{ ID int64 }
	b, _ := io.ReadAll(resp.Body)
	require.Less(t, resp.StatusCode, 300, "%s %s: %s", path, body, b)
	require.NoError(t, json.Unmarshal(b, &out))
	return out.ID
}

// state reads an event's state through the API.
func (s *system) state(t *testing.T, id int64) string {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("%s/events/%d", s.url, id))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct{ State string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out.State
}

func task(url, ref, payload string) string {
	return fmt.Sprintf(`{"url":%q,"referenceId":%q,"payload":%s,"maxRetries":1}`, url, ref, payload)
}

// show opens a page of the console that is already loaded: a change of the location's hash, as a
// click on a link makes (a navigation of the fragment alone loads nothing).
func show(hash string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = %q`, hash))
}

// countOne sends one "added" message of entity id of type typ for user through the counter
// service's queue, and waits until the user's count of typ reads 1.
func (s *system) countOne(t *testing.T, id, typ, user string) {
	t.Helper()
	body, err := json.Marshal(map[string]string{"entityId": id, "entityType": typ, "userId": user, "action": "added"})
	require.NoError(t, err)
	_, err = s.client.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(s.counts), MessageBody: aws.String(string(body))})
	require.NoError(t, err)
	testutil.Eventually(t, 30*time.Second, user+"'s count of "+typ, func() bool {
		resp, err := http.Get(s.url + "/counters/" + user + "/" + typ)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var v struct{ Sum int64 }
		return json.NewDecoder(resp.Body).Decode(&v) == nil && v.Sum == 1
	})
}

// text is the JavaScript of an element's text, "" when it is missing.
func text(sel string) string {
	return fmt.Sprintf(`(document.querySelector(%q) ? document.querySelector(%q).textContent : '')`, sel, sel)
}

// The console against a running system, as an operator uses it: the overview counts what the API
// creates; a task that failed (its receiver answered 400) is listed, retried from the page with a
// confirmation, and completes; an agent killed with SIGKILL leaves the ring and its range moves to
// the other; the workers, a user's counts and a DLQ (dry run, then redrive) are shown; a payload
// holding markup is shown as text. Each page is screenshot to build/ui/ and checked by axe-core.
func TestConsoleInABrowser(t *testing.T) {
	s := startSystem(t)
	b := browser(t)
	ui := s.url + "/ui/"

	// Overview: the counts follow what the API creates.
	run(t, b, "open the overview", chromedp.Navigate(ui), until(`/^\d+$/.test(`+text("#count-total")+`)`))
	var okIDs []int64
	for i := range 3 {
		okIDs = append(okIDs, s.post(t, "/events/async", task(s.hook, "ref-ok", fmt.Sprintf(`{"n":%d}`, i))))
	}
	bad := s.post(t, "/events/async", task(s.hook, "ref-bad", `{"kind":"bad"}`))
	markup := s.post(t, "/events/async", task(s.hook, "ref-markup", `{"note":"<img src=x onerror=\"window.injected=1\">"}`))
	s.post(t, "/events", "")
	run(t, b, "the overview counts every event, one failed",
		until(text("#count-total")+` === '6' && `+text("#count-failed")+` === '1' && `+text("#count-processed")+` === '5'`))
	// Processed by path, from the run's metrics: the one sync create counts for the api path.
	run(t, b, "rates by path", until(`document.querySelector('#path-api') !== null && `+text("#path-rates")+`.includes('not measured here: agent')`))
	shot(t, b, "overview")
	accessible(t, b, "overview")

	// Keyboard: the skip link first, then every section of the navigation, each focus visible.
	var order []string
	for range 10 {
		run(t, b, "tab", chromedp.KeyEvent(kb.Tab))
		order = append(order, value(t, b, "the focused element", chromedp.Evaluate[string](`document.activeElement.textContent.trim() + '|' +
			getComputedStyle(document.activeElement).outlineStyle`)))
	}
	require.Equal(t, []string{"Skip to content|solid", "Overview|solid", "Events|solid", "Failed tasks|solid", "References|solid",
		"Agents|solid", "Workers|solid", "Counters|solid", "Queues|solid"}, order[:9], "keyboard order and visible focus")

	// The skip link, taken with the keyboard as it is meant to be (it shows only when focused), moves
	// the focus to the content and leaves the page where it is.
	run(t, b, "the skip link", chromedp.Evaluate[chromedp.Void](`document.querySelector('a.skip').focus()`), chromedp.KeyEvent(kb.Enter),
		until(`document.activeElement.id === 'main' && `+text("#main h1")+` === 'Overview'`))

	// A page left while it loads draws nothing into the next one, and starts no refresh: the overview
	// and two listings asked at once show the last, and the overview, left before it had drawn, asks
	// nothing more. The overview shown now is left first, and its refreshes with it: one of them
	// falling between the count's start and the next navigation was counted as the new overview's.
	run(t, b, "leave the overview", show("#/references"), until(text("#main h1")+` === 'References'`))
	run(t, b, "count the overview's calls", chromedp.Evaluate[chromedp.Void](`window.overviewCalls = 0;
		const fetched = window.fetch;
		window.fetch = (url, init) => { if (String(url).endsWith('/overview')) window.overviewCalls++; return fetched(url, init); };`))
	run(t, b, "three pages asked at once", show("#/"), show("#/events?state=failed"), show("#/events?state=pending"),
		until(text("#events-table caption")+` === 'pending events, newest first'`))
	time.Sleep(2500 * time.Millisecond) // longer than the overview's refresh: nothing may happen in it
	require.Equal(t, 1, value(t, b, "the overview's calls", chromedp.Evaluate[int](`window.overviewCalls`)),
		"the overview, left before it had drawn, went on refreshing")
	require.Equal(t, "pending events, newest first", value(t, b, "the caption", chromedp.Evaluate[string](text("#events-table caption"))),
		"a page left drew into this one")

	// Events: the processed ones are listed (the whole history: the packed units are read down from the cursor).
	run(t, b, "list processed events", show("#/events?state=processed"),
		until(fmt.Sprintf(`document.querySelector('#events-table a[href="#/events/%d"]') !== null`, okIDs[0])))
	shot(t, b, "events")
	accessible(t, b, "events")

	// A payload with markup is text on the event's page, and nothing of it ran.
	run(t, b, "open the task with markup", show(fmt.Sprintf("#/events/%d", markup)),
		until(text("#event-fields")+`.includes('<img src=x onerror=')`))
	injected := value(t, b, "whether the markup ran", chromedp.Evaluate[bool](`window.injected === 1`))
	require.False(t, injected, "markup from a payload ran in the console")

	// Failed tasks: the failed one is listed with its error; it is retried from the page, and completes.
	run(t, b, "list failed tasks", show("#/failed"),
		until(fmt.Sprintf(`document.querySelector('[data-retry="%d"]') !== null`, bad)),
		until(text("#failed-table")+`.includes('refused on purpose')`))
	shot(t, b, "failed")
	accessible(t, b, "failed tasks")
	s.failing.Store(false)
	run(t, b, "retry from the page", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-retry="%d"]`, bad))),
		until(`document.getElementById('confirm').open`))
	shot(t, b, "retry-confirm")
	run(t, b, "confirm the retry", chromedp.Click(chromedp.CSS("#confirm-ok")),
		until(text("#status")+`.includes('pending again')`))
	testutil.Eventually(t, 30*time.Second, "the retried task completes", func() bool { return s.state(t, bad) == "completed" })
	run(t, b, "the task's page", show(fmt.Sprintf("#/events/%d", bad)),
		until(text("#event-fields")+`.includes('completed')`),
		until(`document.querySelectorAll('#attempts-table tbody tr').length === 2`),
		until(`document.querySelector('#reference-around tr.current') !== null`))
	shot(t, b, "event")
	accessible(t, b, "event")
	run(t, b, "the reference's tasks", show("#/references/ref-ok"),
		until(`document.querySelectorAll('#reference-table tbody tr').length === 3`))
	shot(t, b, "reference")
	accessible(t, b, "reference")
	// A task retried by hand again and again keeps every attempt: past a page (1,000), the page
	// shows the first and a button for the next.
	require.NoError(t, mysqltest.LoadAttempts(context.Background(), s.db, bad, 3, 1000, "again"))
	run(t, b, "a task's attempts past a page", show(fmt.Sprintf("#/events/%d", bad)),
		until(`document.querySelectorAll('#attempts-table tbody tr').length === 1000 && document.querySelector('#more-attempts') !== null`))
	run(t, b, "the next page of attempts", chromedp.Click(chromedp.CSS("#more-attempts")),
		until(`document.querySelectorAll('#attempts-table tbody tr').length === 1002 && document.querySelector('#more-attempts') === null`))

	// Agents: a second agent takes half of the ring; killed, its range moves to the first.
	doomed := child.Start(t, "agent", "DB_DSN="+s.dsn, "AGENT_NAME=doomed-agent", "AGENT_PULSE_INTERVAL=200ms",
		"AGENT_EXPIRATION=1s", "AGENT_POLL_INTERVAL=100ms")
	_, err := doomed.WaitLine("started", 30*time.Second)
	require.NoError(t, err)
	run(t, b, "two agents share the ring", show("#/agents"),
		until(text("#ring-legend")+`.includes('local-sweeper: 0 – 2147483647') && `+
			text("#ring-legend")+`.includes('doomed-agent: 2147483648 – 4294967295')`),
		until(`document.querySelectorAll('#ring path[data-agent]').length === 2`))
	shot(t, b, "agents-two")
	accessible(t, b, "agents")
	doomed.Kill()
	run(t, b, "the killed agent's range moves to the other",
		until(`document.querySelectorAll('#ring path[data-agent]').length === 1 && `+
			`document.querySelector('#ring path[data-agent]').getAttribute('data-agent') === 'local-sweeper' && `+
			text("#ring-legend")+`.includes('local-sweeper: 0 – 4294967295')`))
	shot(t, b, "agents-after-kill")

	run(t, b, "the event workers", show("#/workers"),
		until(`document.querySelectorAll('#workers-table tbody tr td').length > 1`))
	shot(t, b, "workers")
	accessible(t, b, "workers")

	// Counters: a count sent through the counter service's queue.
	s.countOne(t, "m1", "message", "alice")
	run(t, b, "a user's counts", show("#/counters?user=alice"),
		until(text("#counters-table")+`.includes('message')`))
	shot(t, b, "counters")
	accessible(t, b, "counters")
	// A user's counts a page at a time: a second entity type, pages of one, and the link to the next.
	s.countOne(t, "p1", "photo", "alice")
	run(t, b, "a page of a user's counts links to the next", show("#/counters?user=alice&limit=1"),
		until(`document.querySelectorAll('#counters-table tbody tr').length === 1 && `+text("#counters-table")+`.includes('message') && `+
			`document.querySelector('#more-counts') !== null`))
	run(t, b, "the next page", chromedp.Click(chromedp.CSS("#more-counts")),
		until(`document.querySelectorAll('#counters-table tbody tr').length === 1 && `+text("#counters-table")+`.includes('photo') && `+
			`document.querySelector('#more-counts') === null`))

	// Queues: a message in the events DLQ, a dry run that moves nothing, then a redrive.
	_, err = s.client.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(s.events.DLQURL),
		MessageBody: aws.String(fmt.Sprintf(`{"ids":[%d]}`, okIDs[0]))})
	require.NoError(t, err)
	run(t, b, "the queues", show("#/queues"),
		until(`document.querySelector('[data-redrive="events"][data-dry-run="true"]') !== null`),
		chromedp.Click(chromedp.CSS(`[data-redrive="events"][data-dry-run="true"]`)),
		until(text("#redrive-result")+`.includes('1 message(s) would be moved')`))
	shot(t, b, "queues-dry-run")
	accessible(t, b, "queues")
	run(t, b, "redrive", chromedp.Click(chromedp.CSS(`[data-redrive="events"][data-dry-run="false"]`)),
		until(`document.getElementById('confirm').open`), chromedp.Click(chromedp.CSS("#confirm-ok")),
		until(text("#redrive-result")+`.includes('1 message(s) moved')`))
	shot(t, b, "queues-redriven")
}

// A slow rate keeps its digits: one event created and processed at birth (POST /events) over the
// twenty-odd seconds the page watches is about 0.04/s, which one decimal showed as 0.0, as if
// nothing had happened. The overview's rate cards and the rates by path show it with two
// significant digits.
func TestSlowRatesKeepTheirDigits(t *testing.T) {
	s := startSystem(t)
	b := browser(t)
	run(t, b, "open the overview", chromedp.Navigate(s.url+"/ui/"), until(`/^\d+$/.test(`+text("#count-total")+`)`))
	s.post(t, "/events", "")
	// A rate below 0.05/s, shown as a number that is not 0: "0.0" parses as 0 and never passes. The
	// page's rates are over what it watched, the path's over the run's metrics since the console
	// started: both fall below 0.05/s once more than 20 s have passed.
	slow := func(sel string) string {
		return fmt.Sprintf(`(Number(%s) > 0 && Number(%s) < 0.05)`, text(sel), text(sel))
	}
	run(t, b, "slow rates, still shown",
		chromedp.Poll[chromedp.Void](slow("#rate-created")+` && `+slow("#rate-processed")+` && `+slow("#path-api"),
			chromedp.WithPollingInterval(200*time.Millisecond), chromedp.WithPollingTimeout(40*time.Second)))
	for _, sel := range []string{"#rate-created", "#rate-processed", "#path-api"} {
		v := value(t, b, sel, chromedp.Evaluate[string](text(sel)))
		require.Regexp(t, `^0\.0[1-4][0-9]?$`, v, "%s: two significant digits", sel)
	}
	require.Equal(t, "0", value(t, b, "no failures", chromedp.Evaluate[string](text("#rate-failed"))), "none is 0")
	shot(t, b, "overview-slow-rates")
}

// The overview shows where the history is: a packed history is in the pages (its events exact,
// its page rows InnoDB's estimate), new events in the events table until the local sweeper packs
// them too, nothing is archived; the tiers add up to the total the overview's cards count.
func TestHistoryTiersOnTheOverview(t *testing.T) {
	s := startSystem(t)
	b := browser(t)
	_, err := mysqltest.LoadPackedHistory(context.Background(), s.db, 25_000, nil)
	require.NoError(t, err)
	for range 2 {
		s.post(t, "/events", "")
	}
	// The local sweeper folds and packs as the page watches: the events move from the events
	// table to the pages, and every drawing of the tiers adds up.
	n := func(sel string) string { return `Number(` + text(sel) + `.replace(/,/g, ''))` }
	addsUp := func(total int) string {
		return fmt.Sprintf(`%s === 'Where the %s events are' && %s + %s === %d && %s >= 25000 && %s === '—'`,
			text("#history-tiers caption"), commas(total), n("#tier-events"), n("#tier-pages"), total, n("#tier-pages"), text("#tier-archive"))
	}
	run(t, b, "open the overview", chromedp.Navigate(s.url+"/ui/"), until(addsUp(25_002)+` && `+text("#count-total")+` === '25,002'`))
	require.Regexp(t, `^about \d+ page rows$`, value(t, b, "page rows", chromedp.Evaluate[string](text("#tier-pages-held"))))
	require.Equal(t, "nothing archived: every page is in the database", value(t, b, "archive", chromedp.Evaluate[string](text("#tier-archive-held"))))

	// The section refreshes by itself: a create shows in the tiers.
	s.post(t, "/events", "")
	run(t, b, "the tiers refresh", chromedp.Poll[chromedp.Void](addsUp(25_003),
		chromedp.WithPollingInterval(200*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second)))
	shot(t, b, "overview-history")
	accessible(t, b, "overview with the history by tier")

	// Only the overview reads the tiers: on another page, nothing asks for them, however long it waits.
	run(t, b, "count the history's calls", chromedp.Evaluate[chromedp.Void](`window.historyCalls = 0;
		const fetched = window.fetch;
		window.fetch = (url, init) => { if (String(url).endsWith('/history')) window.historyCalls++; return fetched(url, init); };`),
		show("#/workers"), until(`document.querySelector('#workers-table') !== null`))
	time.Sleep(10500 * time.Millisecond) // longer than the tiers' refresh: nothing may happen in it
	require.Zero(t, value(t, b, "the history's calls", chromedp.Evaluate[int](`window.historyCalls`)), "a page other than the overview reads the tiers")
}

// commas writes n as the console does (en-US grouping).
func commas(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
