package api

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/exactlyonce/exactlyonce"
)

// The operators' reads and the bulk retry (the console reads only the API):
//
//	GET  /events?state=<s>[&kind=plain|task][&before=<id>][&limit=<n>]
//	     200 {"state", "kind", "events": [...], "next"}   newest first; without a query, the count
//	GET  /overview                         200 {"time", "events": {...}, "waiting", "oldestWaitingSeconds"}
//	POST /references/{referenceId}/retry   200 {"referenceId", "retried": [...], "placement", "more"}

// ConsoleStore is what the operators' reads need of the events (internal/mysql/eventstore
// implements it). The bulk retry is the TaskStore's (RetryReference).
type ConsoleStore interface {
	ListEvents(ctx context.Context, set string, kind exactlyonce.Kind, before int64, limit int) ([]exactlyonce.Event, int64, error)
	Overview(ctx context.Context) (exactlyonce.Overview, error)
}

// Listing limits. A page also ends early once its events' JSON passes MaxListPayloadBytes, as
// Lambda carries it (carried), so that it fits in one Lambda response (6 MB) whatever the payloads
// (each up to 256 KiB).
const (
	DefaultListLimit    = 50
	MaxListLimit        = 100
	MaxListPayloadBytes = 4 << 20
)

// carried is how many bytes the JSON b takes in a Lambda response: the answer's body travels as a
// JSON string inside the proxy response the runtime marshals, where each '\' and '"' of it takes
// two bytes (the body's '<', '>' and '&' are escaped already, its control characters and U+2028 and
// U+2029 too, each with a '\'). Counted as len(b), a page of payloads of backslashes or quotes, or of
// JSON held in strings (mostly quotes), passed 4 MiB as sent but 6 MB in the response, which Lambda
// refuses: a 502 for the listing of their state.
func carried(b []byte) int {
	n := len(b)
	for _, c := range b {
		if c == '\\' || c == '"' {
			n++
		}
	}
	return n
}

// listParams are the query parameters of the listing.
var listParams = []string{"state", "kind", "before", "limit"}

// errNoConsole answers the operators' reads of a Server without their stores.
var errNoConsole = exactlyonce.Errorf(exactlyonce.EINTERNAL, "the operators' reads are not available")

func (s *Server) consoleStore() (ConsoleStore, error) {
	if s.Console == nil {
		return nil, errNoConsole
	}
	return s.Console, nil
}

// events answers GET /events: the count without a query string, as it always has, else a listing.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	if r.URL.RawQuery == "" {
		s.count(w, r)
		return
	}
	s.listEvents(w, r)
}

// listQuery is a listing's parameters, checked.
type listQuery struct {
	set    string
	kind   exactlyonce.Kind
	before int64
	limit  int
}

// parseListQuery checks a listing's query string: every mistake is an EINVALID error naming it.
func parseListQuery(raw string) (listQuery, error) {
	bad := func(format string, args ...any) (listQuery, error) {
		return listQuery{}, exactlyonce.Errorf(exactlyonce.EINVALID, format, args...)
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return bad("malformed query string")
	}
	for _, k := range slices.Sorted(maps.Keys(q)) { // the first in name order: the same answer every time
		vs := q[k]
		if !slices.Contains(listParams, k) {
			return bad("unknown query parameter %q: the listing takes state, kind, before and limit", sanitize(k))
		}
		if len(vs) > 1 {
			return bad("query parameter %s given %d times: give it once", k, len(vs))
		}
	}
	lq := listQuery{set: q.Get("state"), limit: DefaultListLimit}
	if !q.Has("state") {
		return bad("state is required to list events (without a query string, GET /events counts them)")
	}
	if !slices.Contains(exactlyonce.EventSets, lq.set) {
		return bad("state must be one of %s, got %q", strings.Join(exactlyonce.EventSets, ", "), sanitize(lq.set))
	}
	if q.Has("kind") {
		switch k := exactlyonce.Kind(q.Get("kind")); k {
		case exactlyonce.KindPlain, exactlyonce.KindTask:
			lq.kind = k
		default:
			return bad("kind must be plain or task, got %q", sanitize(string(k)))
		}
	}
	if q.Has("before") {
		if lq.before, err = parseID(q.Get("before"), "before", "an event id, a positive integer"); err != nil {
			return listQuery{}, err
		}
	}
	if q.Has("limit") {
		if lq.limit, err = parseLimit(q.Get("limit"), MaxListLimit); err != nil {
			return listQuery{}, err
		}
	}
	return lq, nil
}

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	lq, err := parseListQuery(r.URL.RawQuery)
	if err != nil {
		s.error(w, r, err)
		return
	}
	cs, err := s.consoleStore()
	if err != nil {
		s.error(w, r, err)
		return
	}
	got, resume, err := cs.ListEvents(r.Context(), lq.set, lq.kind, lq.before, lq.limit+1)
	if err != nil {
		s.error(w, r, err)
		return
	}
	// The page: up to limit events, and fewer if their JSON would pass MaxListPayloadBytes (at least
	// one, which is at most 256 KiB of payload, 1.5 MiB escaped, and its url and messages). Each
	// counts as the answer carries it, JSON-escaped: the encoder writes '<', '>' and '&' in six bytes
	// each, so that 4 MiB of payloads as stored could be 24 MiB sent, and a url of 2,048 bytes 12 KiB;
	// and as Lambda's response carries the answer (carried).
	// next names the last event shown when more may follow.
	var out []any
	size := 0
	for _, e := range got[:min(len(got), lq.limit)] {
		var j any = toJSON(e)
		if e.Task != nil {
			j = taskJSON(e)
		}
		b, err := json.Marshal(j)
		if err != nil {
			s.error(w, r, err)
			return
		}
		if len(out) > 0 && size+carried(b) > MaxListPayloadBytes {
			break
		}
		size += carried(b)
		out = append(out, json.RawMessage(b))
	}
	n := len(out)
	if out == nil {
		out = []any{}
	}
	// Or, when the store stopped looking before it found a page's worth (the processed history is
	// read a bounded number of pages a request), the id it stopped at: every event above it is here.
	var next *string
	if n < len(got) {
		id := strconv.FormatInt(got[n-1].ID, 10)
		next = &id
	} else if resume > 0 {
		id := strconv.FormatInt(resume, 10)
		next = &id
	}
	var kind *string
	if lq.kind != "" {
		k := string(lq.kind)
		kind = &k
	}
	writeJSON(w, http.StatusOK, map[string]any{"state": lq.set, "kind": kind, "events": out, "next": next})
}

// OverviewCountsJSON is the events by state in GET /overview.
type OverviewCountsJSON struct {
	Pending    int64 `json:"pending"`
	Processing int64 `json:"processing"`
	Queued     int64 `json:"queued"`
	Processed  int64 `json:"processed"`
	Failed     int64 `json:"failed"`
	Total      int64 `json:"total"`
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	cs, err := s.consoleStore()
	if err != nil {
		s.error(w, r, err)
		return
	}
	o, err := cs.Overview(r.Context())
	if err != nil {
		s.error(w, r, err)
		return
	}
	var oldest *float64
	if o.OldestWaiting != nil {
		secs := o.OldestWaiting.Seconds()
		oldest = &secs
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"time": o.Time.UTC(),
		"events": OverviewCountsJSON{Pending: o.Pending, Processing: o.Processing, Queued: o.Queued,
			Processed: o.Processed, Failed: o.Failed, Total: o.Total},
		"waiting":              o.Waiting,
		"oldestWaitingSeconds": oldest,
	})
}

func (s *Server) retryReference(w http.ResponseWriter, r *http.Request) {
	ref := r.PathValue("referenceId")
	if err := exactlyonce.CheckPathName("referenceId", ref); err != nil {
		s.error(w, r, err)
		return
	}
	if err := s.readRetryBody(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	if err := noKey(r); err != nil {
		s.error(w, r, err)
		return
	}
	if s.Tasks == nil {
		s.error(w, r, errNoConsole)
		return
	}
	done, err := s.Tasks.RetryReference(r.Context(), ref)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if done.Head != 0 {
		s.asyncGroups().queueCommitted(r.Context(), []int64{done.Head})
	}
	var placement *exactlyonce.RetryPlacement
	if len(done.IDs) > 0 {
		placement = &done.Placement
	}
	writeJSON(w, http.StatusOK, map[string]any{"referenceId": ref, "retried": done.IDs, "placement": placement, "more": done.More})
}
