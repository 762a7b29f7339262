package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/redrive"
)

// queues serves GET /ui/api/queues and POST /ui/api/queues/{name}/redrive for the configured
// source queues, each with the DLQ its RedrivePolicy names (redrive.Resolve, as cmd/redrive finds it).
type queues struct {
	client  *sqs.Client
	log     *slog.Logger
	names   []string          // in the configured order
	entries map[string]string // name -> the configured name or URL
	busy    sync.Map          // name -> *sync.Mutex: one redrive of a queue at a time
}

// sampleSize is how many bodies a dry run shows; dryRunLimit is the most messages it lists (and
// holds invisible while it lists them): past it, the count is the DLQ's approximate one.
const (
	maxRedriveBody = 1024
	sampleSize     = 10
	dryRunLimit    = 100
)

// DefaultAWSTimeout is Options.AWSTimeout's default: reading the depths of a few queues, listing at
// most dryRunLimit messages of a DLQ, or one GetMetricData of the rates takes well under a second;
// an endpoint that has not answered in 10 s is failing, and the page says so rather than waiting
// with it.
const DefaultAWSTimeout = 10 * time.Second

// configure takes the source queues, names or URLs; a queue's name in the console's paths is its
// name, the last segment of its URL.
func (q *queues) configure(list []string) error {
	q.entries = map[string]string{}
	for _, e := range list {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		name := e
		if strings.HasPrefix(e, "https://") || strings.HasPrefix(e, "http://") {
			name = e[strings.LastIndex(strings.TrimSuffix(e, "/"), "/")+1:]
			name = strings.TrimSuffix(name, "/")
		}
		if name == "" || strings.ContainsAny(name, "/?#%") {
			return fmt.Errorf("console: queue %q: want a queue name or URL", e)
		}
		if _, dup := q.entries[name]; dup {
			return fmt.Errorf("console: queue %q is configured twice", name)
		}
		q.entries[name] = e
		q.names = append(q.names, name)
	}
	return nil
}

// queueJSON is one source queue and its DLQ in GET /ui/api/queues.
type queueJSON struct {
	Name     string   `json:"name"`
	URL      string   `json:"url"`
	Visible  int      `json:"visible"`
	InFlight int      `json:"inFlight"`
	Delayed  int      `json:"delayed"`
	DLQ      *dlqJSON `json:"dlq"`
}

type dlqJSON struct {
	Name     string `json:"name"`
	URL      string `json:"url"`
	Visible  int    `json:"visible"`
	InFlight int    `json:"inFlight"`
}

// serveQueues answers GET /ui/api/queues (rest "") and POST /ui/api/queues/{name}/redrive.
func (c *console) serveQueues(w http.ResponseWriter, r *http.Request, rest string) {
	q := c.queues
	if rest == "" {
		if r.Method != http.MethodGet {
			methodNotAllowed(w, "GET")
			return
		}
		if len(r.URL.Query()) > 0 {
			writeError(w, http.StatusBadRequest, "GET /ui/api/queues takes no query parameters")
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), c.awsTimeout())
		defer cancel()
		out := []queueJSON{}
		for _, name := range q.names {
			j, err := q.depths(ctx, name)
			if err != nil {
				c.log.Error("console: queue depths", "queue", name, "err", err)
				writeError(w, http.StatusBadGateway, "the depths of the queue "+quote(name)+" could not be read; the console's log says why")
				return
			}
			out = append(out, j)
		}
		writeJSON(w, http.StatusOK, map[string]any{"queues": out})
		return
	}
	segs := strings.Split(strings.TrimPrefix(rest, "/"), "/")
	name, err := url.PathUnescape(segs[0])
	if len(segs) != 2 || segs[1] != "redrive" || err != nil || q.entries[name] == "" {
		writeError(w, http.StatusNotFound, "no such console API route: /ui/api/queues"+rest+" (a redrive is POST /ui/api/queues/{name}/redrive, of a configured queue)")
		return
	}
	if r.Method != http.MethodPost {
		methodNotAllowed(w, "POST")
		return
	}
	if r.URL.RawQuery != "" {
		writeError(w, http.StatusBadRequest, `POST /ui/api/queues/{name}/redrive takes no query parameters: the body says {"dryRun": true} or {"dryRun": false}`)
		return
	}
	if !c.checkPost(w, r) {
		return
	}
	dryRun, err := redriveBody(http.MaxBytesReader(w, r.Body, maxRedriveBody))
	if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
		// Said as what it is: a {"dryRun": false} padded past the limit was a 400 saying the body
		// must be {"dryRun": false}.
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf(`the body is over %d bytes: a redrive's is {"dryRun": true} or {"dryRun": false}`, maxRedriveBody))
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	mu, _ := q.busy.LoadOrStore(name, &sync.Mutex{})
	if !mu.(*sync.Mutex).TryLock() {
		writeError(w, http.StatusConflict, "a redrive of the queue "+quote(name)+" is already running")
		return
	}
	defer mu.(*sync.Mutex).Unlock()
	ctx := r.Context()
	// Finding the queues, and a dry run, are bounded like the depths; a redrive moves every message
	// of the DLQ, which takes as long as it takes.
	bounded, cancel := context.WithTimeout(ctx, c.awsTimeout())
	defer cancel()
	rq, err := redrive.Resolve(bounded, q.client, q.entries[name], "")
	if err != nil {
		c.log.Error("console: redrive: resolve the queue and its DLQ", "queue", name, "err", err)
		writeError(w, http.StatusBadGateway, "the queue "+quote(name)+" or its DLQ could not be found; the console's log says why")
		return
	}
	if dryRun {
		// The DLQ's own count first: a dry run that stops at dryRunLimit answers it instead.
		approx, err := counts(bounded, q.client, rq.DLQURL, types.QueueAttributeNameApproximateNumberOfMessages)
		var n int
		var sample []string
		var more bool
		if err == nil {
			n, sample, more, err = redrive.PeekAtMost(bounded, q.client, rq, sampleSize, dryRunLimit, io.Discard)
		}
		if errors.Is(err, redrive.ErrRefused) {
			c.refused(w, name, rq, err)
			return
		}
		if denied(err) {
			c.denied(w, name, err)
			return
		}
		if err != nil {
			c.log.Error("console: redrive dry run", "queue", name, "dlq", rq.DLQURL, "err", err)
			writeError(w, http.StatusBadGateway, "the dry run of "+quote(name)+" failed; the console's log says why")
			return
		}
		if more {
			n = max(n, approx[0])
		}
		c.log.Info("console: redrive dry run", "queue", name, "dlq", rq.DLQURL, "messages", n, "approximate", more)
		if sample == nil {
			sample = []string{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"dryRun": true, "messages": n, "approximate": more, "sample": sample})
		return
	}
	moved, err := redrive.Redrive(ctx, q.client, rq, 2*time.Second, io.Discard)
	if errors.Is(err, redrive.ErrRefused) {
		c.refused(w, name, rq, err)
		return
	}
	if denied(err) && moved == 0 {
		c.denied(w, name, err)
		return
	}
	if err != nil {
		c.log.Error("console: redrive", "queue", name, "dlq", rq.DLQURL, "moved", moved, "err", err)
		writeError(w, http.StatusBadGateway, fmt.Sprintf("the redrive of %s stopped after moving %d messages; the console's log says why", quote(name), moved))
		return
	}
	c.log.Info("console: redrive", "queue", name, "dlq", rq.DLQURL, "moved", moved)
	writeJSON(w, http.StatusOK, map[string]any{"dryRun": false, "moved": moved})
}

// refused answers a dry run or redrive that redrive refused before anything moved: the DLQ is the
// dead-letter queue of other queues too (redrive.CheckSources), whose messages it would send to
// this one. A 409: the queues' configuration is the operator's to change; the log names the queues.
func (c *console) refused(w http.ResponseWriter, name string, rq redrive.Queues, err error) {
	c.log.Warn("console: redrive refused", "queue", name, "dlq", rq.DLQURL, "err", err)
	writeError(w, http.StatusConflict, "the redrive of "+quote(name)+" was refused before anything moved: its DLQ is the dead-letter queue of other queues too "+
		"(or the endpoint cannot tell), and their messages would go to "+quote(name)+"; the console's log names them")
}

// denied answers a dry run or redrive that SQS refused for want of a permission (AccessDenied): the
// console's AWS credentials lack an action a redrive needs, which the operator can grant (console.md
// lists them). A 403, logged as a warning with SQS's message, which names the action.
func (c *console) denied(w http.ResponseWriter, name string, err error) {
	c.log.Warn("console: redrive denied by SQS", "queue", name, "err", err)
	writeError(w, http.StatusForbidden, "SQS refused the console's AWS credentials an action the redrive of "+quote(name)+
		" needs (sqs:GetQueueAttributes, sqs:ListDeadLetterSourceQueues, sqs:StartMessageMoveTask, sqs:ListMessageMoveTasks, or, without move tasks, "+
		"sqs:ReceiveMessage, sqs:ChangeMessageVisibility, sqs:SendMessage, sqs:DeleteMessage); the console's log names the one refused")
}

func (c *console) awsTimeout() time.Duration { return cmp.Or(c.opt.AWSTimeout, DefaultAWSTimeout) }

// depths reads the depths of the queue name and of the DLQ its RedrivePolicy names (none: dlq null).
func (q *queues) depths(ctx context.Context, name string) (queueJSON, error) {
	j := queueJSON{Name: name}
	u, err := redrive.QueueURL(ctx, q.client, q.entries[name])
	if err != nil {
		return j, err
	}
	j.URL = u
	n, err := counts(ctx, q.client, u, types.QueueAttributeNameApproximateNumberOfMessages,
		types.QueueAttributeNameApproximateNumberOfMessagesNotVisible, types.QueueAttributeNameApproximateNumberOfMessagesDelayed)
	if err != nil {
		return j, err
	}
	j.Visible, j.InFlight, j.Delayed = n[0], n[1], n[2]
	rq, err := redrive.Resolve(ctx, q.client, u, "")
	if err != nil {
		// A queue without a RedrivePolicy has no DLQ to show; the reason is logged in case it is
		// something else.
		q.log.Info("console: queue shown without a DLQ", "queue", name, "why", err)
		return j, nil
	}
	d := &dlqJSON{Name: rq.DLQURL[strings.LastIndex(rq.DLQURL, "/")+1:], URL: rq.DLQURL}
	n, err = counts(ctx, q.client, rq.DLQURL, types.QueueAttributeNameApproximateNumberOfMessages,
		types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)
	if err != nil {
		return j, err
	}
	d.Visible, d.InFlight = n[0], n[1]
	j.DLQ = d
	return j, nil
}

// counts reads integer attributes of the queue at url; a missing or garbled one is an error, not 0,
// which would show a queue as empty.
func counts(ctx context.Context, c *sqs.Client, url string, names ...types.QueueAttributeName) ([]int, error) {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: names})
	if err != nil {
		return nil, fmt.Errorf("attributes of %s: %w", url, err)
	}
	n := make([]int, len(names))
	for i, name := range names {
		v, ok := out.Attributes[string(name)]
		if !ok && name == types.QueueAttributeNameApproximateNumberOfMessagesDelayed {
			continue // goaws does not report it; it has no delayed messages to count
		}
		if n[i], err = strconv.Atoi(v); err != nil {
			return nil, errors.Join(fmt.Errorf("attribute %s of %s", name, url), err)
		}
	}
	return n, nil
}

// redriveBody reads a redrive's body, {"dryRun": true} or {"dryRun": false}, by the one rule of every
// body (exactlyonce.DecodeObject): the name matched exactly, given once, nothing else. Its error is
// safe to show.
func redriveBody(body io.Reader) (dryRun bool, err error) {
	bad := errors.New(`the body must be {"dryRun": true} or {"dryRun": false}`)
	b, err := io.ReadAll(body)
	if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
		return false, err
	}
	if err != nil {
		return false, bad
	}
	fields, err := exactlyonce.DecodeObject(b)
	var twice *exactlyonce.Error
	switch {
	case errors.As(err, &twice):
		return false, errors.New(twice.Message + `; the body is {"dryRun": true} or {"dryRun": false}`)
	case err != nil || len(fields) != 1:
		return false, bad
	}
	switch string(fields["dryRun"]) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, bad
}
