package api

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/groupcommit"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/queue"
)

// The Idempotency-Key header of POST /events and POST /events/async (draft-ietf-httpapi-
// idempotency-key-header): the first request with a key stores the key, a fingerprint of the
// request and its answer in the transaction that stores its event; a repeat gets that answer byte
// for byte, with Idempotent-Replayed: true, and stores nothing. A request without the header takes
// the path it always took.
const (
	// KeyHeader names the key.
	KeyHeader = "Idempotency-Key"
	// ReplayedHeader marks a stored answer given again.
	ReplayedHeader = "Idempotent-Replayed"
	// MaxKeyLength is the longest key, in characters.
	MaxKeyLength = 255
)

// Defaults of Idempotency.
const (
	DefaultKeyTTL  = 24 * time.Hour
	DefaultKeyWait = 10 * time.Second
)

// Error codes of keyed requests; the API's own, as they exist only at the HTTP edge.
const (
	eKEYMISMATCH = "key_mismatch" // the key was used with another request: 422
)

// Idempotency configures idempotency keys. The zero value takes the defaults and one scope.
type Idempotency struct {
	// TTL is how long a stored key answers repeats (IDEMPOTENCY_TTL). Default DefaultKeyTTL.
	TTL time.Duration
	// Wait bounds how long a request waits for another with its key that is in flight
	// (IDEMPOTENCY_WAIT) before it answers 409. Default DefaultKeyWait.
	Wait time.Duration
	// Required makes the header mandatory on creates (IDEMPOTENCY_REQUIRED): 400 without it.
	Required bool
	// Scope returns the caller's identity, part of every key, so that one caller never gets
	// another's stored answer: on Lambda the IAM identity of the API Gateway request context
	// (functions/api). Nil: one scope for every caller (a local run).
	Scope func(*http.Request) string
}

// KeyStore is what keyed creates need of the idempotency keys' store (internal/mysql/keystore
// implements it).
type KeyStore interface {
	CreateKeyed(ctx context.Context, opt exactlyonce.KeyOptions, creates []exactlyonce.KeyedCreate) ([]exactlyonce.KeyedResult, error)
}

// idempotencyKey reads the request's key: ok is false when it has none. A bad key, or none when
// one is required, is an EINVALID error.
func (s *Server) idempotencyKey(r *http.Request) (key string, ok bool, err error) {
	values := r.Header.Values(KeyHeader)
	switch {
	case len(values) == 0 && s.Idempotency.Required:
		return "", false, exactlyonce.Errorf(exactlyonce.EINVALID, "the %s header is required on creates", KeyHeader)
	case len(values) == 0:
		return "", false, nil
	case len(values) > 1:
		return "", false, exactlyonce.Errorf(exactlyonce.EINVALID, "give one %s header, not %d", KeyHeader, len(values))
	}
	key, err = parseKey(values[0])
	return key, err == nil, err
}

// parseKey reads a key: 1-255 visible ASCII characters, bare or as a structured-field string
// (RFC 8941: in double quotes, with \" and \\ as the only escapes, and spaces allowed inside).
func parseKey(v string) (string, error) {
	bad := func(why string) error {
		return exactlyonce.Errorf(exactlyonce.EINVALID,
			"%s must be 1-%d visible ASCII characters, bare or in double quotes: %s", KeyHeader, MaxKeyLength, why)
	}
	if strings.HasPrefix(v, `"`) {
		if len(v) < 2 || !strings.HasSuffix(v, `"`) {
			return "", bad("an opening quote without a closing one")
		}
		var b strings.Builder
		inner := v[1 : len(v)-1]
		for i := 0; i < len(inner); i++ {
			c := inner[i]
			switch {
			case c == '\\':
				if i+1 == len(inner) || (inner[i+1] != '"' && inner[i+1] != '\\') {
					return "", bad(`a backslash escapes only \" and \\`)
				}
				i++
				b.WriteByte(inner[i])
			case c == '"':
				return "", bad("a quote inside the quotes is escaped as \\\"")
			case c < 0x20 || c > 0x7e:
				return "", bad("a character that is not visible ASCII")
			default:
				b.WriteByte(c)
			}
		}
		v = b.String()
	} else {
		for i := 0; i < len(v); i++ {
			if v[i] <= 0x20 || v[i] > 0x7e {
				return "", bad("a character that is not visible ASCII")
			}
		}
	}
	switch {
	case v == "":
		return "", bad("it is empty")
	case len(v) > MaxKeyLength:
		return "", bad(fmt.Sprintf("it is %d characters long", len(v)))
	}
	return v, nil
}

// fingerprint identifies a request for its key: a repeat must have the same method, path and body.
// A body of only JSON whitespace is no body, as the API reads it (docs/api.md, "Request bodies"),
// so it is fingerprinted as none: a repeat that adds or drops it is the same request.
func fingerprint(r *http.Request, body []byte) [32]byte {
	if len(bytes.TrimLeft(body, " \t\r\n")) == 0 {
		body = nil
	}
	b := sha256.Sum256(body)
	h := sha256.New()
	h.Write([]byte(r.Method + "\n" + r.URL.Path + "\n"))
	h.Write(b[:])
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// createKeyed answers a create that carries a key: the first answer with this key, stored with its
// event, or, for a repeat, that answer again.
func (s *Server) createKeyed(w http.ResponseWriter, r *http.Request, key string, body []byte, pending bool, task *exactlyonce.NewTask) {
	ks := s.Keys
	if ks == nil {
		s.error(w, r, exactlyonce.Errorf(exactlyonce.EINTERNAL, "idempotency keys are not available"))
		return
	}
	scope := ""
	if s.Idempotency.Scope != nil {
		scope = s.Idempotency.Scope(r)
	}
	c := exactlyonce.KeyedCreate{Key: exactlyonce.KeyHash(scope, key), Fingerprint: fingerprint(r, body), Pending: pending, Task: task}
	if pending {
		c.Answer = func(id int64) (int, []byte) { return http.StatusAccepted, answerJSON(map[string]int64{"id": id}) }
	} else {
		newValue := s.NewValue
		if newValue == nil {
			newValue = exactlyonce.NewValue
		}
		value := newValue()
		c.Value = value
		c.Answer = func(id int64) (int, []byte) {
			return http.StatusCreated, answerJSON(toJSON(exactlyonce.Event{ID: id, Kind: exactlyonce.KindPlain, Value: &value,
				State: exactlyonce.Processed, ProcessedBy: exactlyonce.ByAPI, ProcessCount: 1}))
		}
	}
	res, err := s.keyGroups(ks).create(r.Context(), c)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if !res.Created && res.Record.Fingerprint != c.Fingerprint {
		s.error(w, r, exactlyonce.Errorf(eKEYMISMATCH,
			"this %s was used with another request (method, path or body): use a new key for a new request", KeyHeader))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	rec := metrics.From(r.Context())
	switch {
	case !res.Created:
		h.Set(ReplayedHeader, "true")
		rec.Add(metrics.IdempotentReplays, 1)
	case pending:
		rec.Add(metrics.EventsCreatedAsync, 1)
	default:
		rec.Add(metrics.EventsCreatedSync, 1)
	}
	w.WriteHeader(res.Record.Status)
	_, _ = w.Write(res.Record.Body)
}

// answerJSON is what writeJSON writes.
func answerJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // our own types
	}
	return append(b, '\n')
}

// keyGroups returns the server's keyed groups, made on first use.
func (s *Server) keyGroups(store KeyStore) *keyGroups {
	s.keysOnce.Do(func() {
		ag := s.asyncGroups()
		g := &keyGroups{store: store, queue: ag.queue, out: ag.out, log: ag.log,
			opt:     exactlyonce.KeyOptions{TTL: cmp.Or(s.Idempotency.TTL, DefaultKeyTTL), Wait: cmp.Or(s.Idempotency.Wait, DefaultKeyWait)},
			flights: map[[32]byte]*flight{}}
		g.group = groupcommit.Group[*flight, exactlyonce.KeyedResult]{Run: g.run,
			MaxRows: min(ag.max, exactlyonce.MaxKeyedGroup), MaxBytes: maxKeyedGroupBytes, Size: keyedSize,
			Flushers: max(ag.slots, keyedGroupsInFlight), Staged: true, ShareAt: keyedShareAt, Inline: ag.inline,
			Timeout: groupTimeout + g.opt.Wait,
			Context: func() context.Context { return metrics.With(context.Background(), ag.rec) }}
		s.keys = g
	})
	return s.keys
}

// keyedGroupsInFlight is the most keyed groups of a process at once: one or two running their
// statements (keyedShareAt) and the others waiting for their COMMITs (groupcommit.Group.Staged). A
// commit waits for the database's log flush, which concurrent commits share: with one group at a
// time, the flush was most of a group's time, and the requests that came meanwhile waited for it
// idle.
const keyedGroupsInFlight = 4

// keyedShareAt is how many keyed creates must wait before a second group runs its statements beside
// the one running them (groupcommit.Group.ShareAt). With one group at a time, each request waited
// for the statements of the group before its own, and at 64 clients the statements of one group
// were the bound; a second group of at least 8 pays for its statements about as well as the first
// (a group of fresh keys is four round trips however many it holds), where free-running flushers
// made groups of one or two.
const keyedShareAt = 8

// maxKeyedGroupBytes bounds the bytes the creates of one keyed group carry (keyedSize): a keyed
// task create carries up to exactlyonce.MaxTaskPayloadBytes, and a group of
// exactlyonce.MaxKeyedGroup of them would hold 25 MiB.
const maxKeyedGroupBytes = 8 << 20

// keyedSize is a keyed create's rows and bytes, for its group's bounds: its value, or its task's
// address, payload and reference.
func keyedSize(f *flight) (rows, bytes int) {
	n := len(f.c.Value)
	if t := f.c.Task; t != nil {
		n += len(t.URL) + len(t.Payload) + len(t.ReferenceID)
	}
	return 1, n
}

// keyGroups stores keyed creates as the async groups store async ones (group.go, through
// internal/groupcommit): the creates that arrive while a group is being stored wait for the next,
// which is one transaction for all of them (a group of fresh keys is a transaction of four round
// trips, its COMMIT included, which the group shares), each of at most exactlyonce.MaxKeyedGroup
// creates and maxKeyedGroupBytes of values and tasks. One group at a time runs its statements, or
// two once keyedShareAt creates wait; once only its COMMIT is left (the store calls
// groupcommit.Release), the next group gathers what waits and runs beside it, up to
// keyedGroupsInFlight groups at once (groupcommit.Group.Staged): the commits then share the
// database's log flushes. Free-running flushers (2 and 4, measured) were slower at 16 clients:
// they split the requests into smaller groups.
// Inline (on Lambda), each create is its own group, in its request's goroutine.
//
// Two requests of this process with one key are never in one group: the second waits for the
// first's outcome (a flight) and then gets its answer, or, if the first stored nothing, tries
// itself. Requests with one key in different processes meet on the key's lock in the database.
type keyGroups struct {
	store KeyStore
	opt   exactlyonce.KeyOptions
	queue queue.Sender
	out   *outbox
	log   *slog.Logger
	group groupcommit.Group[*flight, exactlyonce.KeyedResult]

	mu      sync.Mutex
	flights map[[32]byte]*flight // the keys being stored by this process, by hash
}

// flight is one keyed create being stored; done is closed when res or err is set.
type flight struct {
	c    exactlyonce.KeyedCreate
	done chan struct{}
	res  exactlyonce.KeyedResult
	err  error
}

func (g *keyGroups) create(ctx context.Context, c exactlyonce.KeyedCreate) (exactlyonce.KeyedResult, error) {
	wait := time.NewTimer(time.Until(exactlyonce.KeyWaitUntil(ctx, g.opt.Wait)))
	defer wait.Stop()
	for {
		g.mu.Lock()
		if f := g.flights[c.Key]; f != nil {
			// A request with this key is in flight in this process: wait for its outcome.
			g.mu.Unlock()
			select {
			case <-f.done:
			case <-wait.C:
				return exactlyonce.KeyedResult{}, exactlyonce.Errorf(exactlyonce.ECONFLICT,
					"a request with this idempotency key is still in progress; retry later")
			case <-ctx.Done():
				return exactlyonce.KeyedResult{}, ctx.Err()
			}
			if f.err == nil {
				return exactlyonce.KeyedResult{Record: f.res.Record}, nil // its answer, replayed
			}
			continue // it stored nothing that we know of: try ourselves
		}
		f := &flight{c: c, done: make(chan struct{})}
		g.flights[c.Key] = f
		g.mu.Unlock()
		// The flight ends with its group (run), whether or not this request is still waiting.
		return g.group.Do(ctx, f)
	}
}

// run stores one group, sends the messages of the pending events it created (or hands them to the
// outbox), and ends its flights.
func (g *keyGroups) run(ctx context.Context, group []*flight) ([]exactlyonce.KeyedResult, error) {
	creates := make([]exactlyonce.KeyedCreate, len(group))
	for i, f := range group {
		creates[i] = f.c
	}
	results, err := g.store.CreateKeyed(ctx, g.opt, creates)
	if err == nil && len(results) != len(group) {
		err = fmt.Errorf("create keyed: %d results for %d creates", len(results), len(group))
	}
	if err == nil {
		var ids []int64
		for i, r := range results {
			if r.Created && creates[i].Pending {
				ids = append(ids, r.Record.EventID)
			}
		}
		switch {
		case len(ids) == 0:
		case g.out != nil:
			g.out.add(ids)
		case g.queue != nil:
			for len(ids) > 0 {
				n := min(len(ids), queue.MaxIDs)
				sendOrLeave(ctx, g.queue, g.log, ids[:n])
				ids = ids[n:]
			}
		}
	}
	g.mu.Lock()
	for i, f := range group {
		if err != nil {
			f.err = err
		} else {
			f.res = results[i]
		}
		delete(g.flights, f.c.Key)
		close(f.done)
	}
	g.mu.Unlock()
	return results, err
}
