package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// runProcessorWorkers measures the processor's event workers: the same ordered tasks delivered by
// the processor (the SQS path: batches of 10 messages naming 100 tasks each, as the API's grouped
// sends make them) through its EventService under an agent without a range, beside the processor
// without one, alternating rounds.
func (r *run) runProcessorWorkers(ctx context.Context, group string, store *wire.Stores, url string) error {
	client := webhook.New(webhook.Config{Key: []byte("0123456789abcdef0123456789abcdef"), AllowLoopback: true})
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	refs, perRef := pick(r, 500, 20), pick(r, 20, 5)
	drain := func(tag string, withWorkers bool) (time.Duration, error) {
		var ids []int64
		for k := 0; k < perRef; k++ {
			batch := make([]exactlyonce.NewTask, 0, refs)
			for i := 0; i < refs; i++ {
				payload, _ := json.Marshal(map[string]int{"seq": k})
				batch = append(batch, exactlyonce.NewTask{URL: url, Payload: payload, ReferenceID: fmt.Sprintf("%s-%d", tag, i)})
			}
			for len(batch) > 0 {
				n := min(len(batch), 200) // the most one create takes
				created, err := store.Tasks.CreateTasks(ctx, batch[:n])
				if err != nil {
					return 0, err
				}
				for _, c := range created {
					ids = append(ids, c.ID)
				}
				batch = batch[n:]
			}
		}
		var workers *wire.EventWorkers
		if withWorkers {
			workers = &wire.EventWorkers{Member: agents.MemberConfig{Name: "bench-processor", Logger: log}}
		}
		p, err := wire.Processor(store, processing.Engine{Logger: log, Tasks: &processing.Tasks{Deliverer: client}}, nil, workers)
		if err != nil {
			return 0, err
		}
		start := time.Now()
		for i := 0; i < len(ids); i += 1000 {
			var ev events.SQSEvent
			for j := i; j < min(i+1000, len(ids)); j += 100 {
				ev.Records = append(ev.Records, events.SQSMessage{MessageId: strconv.Itoa(j),
					Body: queue.EncodeIDs(ids[j:min(j+100, len(ids))])})
			}
			res, err := p.Handle(ctx, ev)
			if err != nil {
				return 0, err
			}
			if len(res.BatchItemFailures) > 0 {
				return 0, fmt.Errorf("processor: %d messages failed", len(res.BatchItemFailures))
			}
		}
		took := time.Since(start)
		open, err := mysqltest.CountOpen(ctx, store.DB.Pool())
		if err != nil {
			return 0, err
		}
		r.check(group, fmt.Sprintf("processor (event workers %t): every task delivered by its batches", withWorkers), open == 0,
			fmt.Sprintf("%d open", open))
		return took, p.Close(ctx)
	}
	if !r.smoke() { // a warm-up drain of each, not counted, and six rounds each (runTaskWorkers says why)
		for _, w := range []bool{true, false} {
			if _, err := drain(fmt.Sprintf("pwarm-%t", w), w); err != nil {
				return err
			}
		}
	}
	rounds := pick(r, 6, 1)
	var with, without time.Duration
	for round := range rounds {
		order := []bool{true, false}
		if round%2 == 1 {
			order = []bool{false, true}
		}
		for _, w := range order {
			took, err := drain(fmt.Sprintf("p%d-%t", round, w), w)
			if err != nil {
				return err
			}
			r.progress(group, "processor, event workers %-5t: %d tasks over %d references in %.2f s (%.0f tasks/s)", w, refs*perRef, refs,
				took.Seconds(), float64(refs*perRef)/took.Seconds())
			if w {
				with += took
			} else {
				without += took
			}
		}
	}
	n := float64(rounds * refs * perRef)
	withRow := Row{Group: group, Name: "tasks_processor_workers_tps", Value: n / with.Seconds(), Unit: "tasks/s",
		Note: fmt.Sprintf("%d tasks over %d references per round, %d rounds, delivered by the processor's batches (10 messages of 100 ids) through its EventService, under an agent without a range", refs*perRef, refs, rounds)}
	withoutRow := Row{Group: group, Name: "tasks_processor_workers_off_tps", Value: n / without.Seconds(), Unit: "tasks/s",
		Note: "the same tasks, alternating rounds, the processor without an EventService (no registry, no agent)"}
	r.add(withRow, withoutRow, ratio(group, "tasks_processor_workers_ratio", withRow, withoutRow, atLeast(0.9),
		"processor delivery through its EventService vs without one"))
	return nil
}
