package mysqltest

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/exactlyonce/exactlyonce"
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
