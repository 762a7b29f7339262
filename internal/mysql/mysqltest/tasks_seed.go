package mysqltest

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/taskstore"
)

// ReferencePayload is the payload of a task CreateReferenceTasks creates: its reference and its
// place in it, so that a receiver can check the order of each reference's deliveries.
type ReferencePayload struct {
	Ref string `json:"ref"`
	Seq int    `json:"seq"`
}

// CreateReferenceTasks creates perRef tasks for each of refs references ref-0, ref-1, ..., to url,
// with maxRetries each: the first of every reference, then the second, ..., one CreateTasks a
// round. It returns their ids in that order.
func CreateReferenceTasks(ctx context.Context, tasks *taskstore.Store, url string, refs, perRef, maxRetries int) ([]int64, error) {
	var ids []int64
	for k := range perRef {
		batch := make([]exactlyonce.NewTask, 0, refs)
		for r := range refs {
			ref := fmt.Sprintf("ref-%d", r)
			payload, err := json.Marshal(ReferencePayload{Ref: ref, Seq: k})
			if err != nil {
				return nil, err
			}
			batch = append(batch, exactlyonce.NewTask{URL: url, Payload: payload, ReferenceID: ref, MaxRetries: maxRetries})
		}
		created, err := tasks.CreateTasks(ctx, batch)
		if err != nil {
			return nil, fmt.Errorf("create reference tasks: %w", err)
		}
		for _, c := range created {
			ids = append(ids, c.ID)
		}
	}
	return ids, nil
}

// FailedReferenceTasks creates n tasks of reference ref to url (CreateTasks calls of
// eventstore.MaxPendingBatch, a few at once) and marks them failed (state 20, one attempt, in one
// statement): a reference whose receiver was down for long, with maxRetries 0. It returns their ids
// in position order.
func FailedReferenceTasks(ctx context.Context, db *sql.DB, tasks *taskstore.Store, url, ref string, n int) ([]int64, error) {
	var ids []int64
	for done := 0; done < n; {
		batch := make([]exactlyonce.NewTask, 0, eventstore.MaxPendingBatch)
		for ; done < n && len(batch) < eventstore.MaxPendingBatch; done++ {
			batch = append(batch, exactlyonce.NewTask{URL: url, Payload: json.RawMessage(fmt.Sprintf(`{"seq":%d}`, done)), ReferenceID: ref})
		}
		created, err := tasks.CreateTasks(ctx, batch)
		if err != nil {
			return nil, fmt.Errorf("create failed reference tasks: %w", err)
		}
		for _, c := range created {
			ids = append(ids, c.ID)
		}
	}
	_, err := db.ExecContext(ctx, "UPDATE events SET state = 20, attempts = 1, processed_at = NOW(6) WHERE kind = 'task' AND state < 10 AND CAST(reference_id AS BINARY) = ?", ref)
	return ids, err
}
