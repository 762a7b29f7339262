package eventstore

import (
	"database/sql"

	"github.com/exactlyonce/exactlyonce"
)

// taskColumns are the task's columns of an events row, NULL for other kinds.
type taskColumns struct {
	url, reference       sql.NullString
	payload              []byte
	maxRetries, position sql.NullInt64
	hash                 uint32
	worker               sql.NullString
	retryBase            sql.NullInt64
}

func (t taskColumns) task(kind exactlyonce.Kind) *exactlyonce.Task {
	if kind != exactlyonce.KindTask {
		return nil
	}
	return &exactlyonce.Task{URL: t.url.String, Payload: t.payload, ReferenceID: t.reference.String,
		MaxRetries: int(t.maxRetries.Int64), Position: t.position.Int64, Hash: t.hash, WorkerID: t.worker.String,
		RetryBase: int(t.retryBase.Int64)}
}
