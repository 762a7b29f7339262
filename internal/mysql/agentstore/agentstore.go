// Package agentstore is the agents and their event workers: the agents table (agents.go,
// agents.sql), where agents register, pulse, eject the expired and persist their assignments; and
// the event workers' registry (workers.go, workers.sql), which internal/processing's EventService
// keeps. The settlement of tasks (taskstore) writes the workers' books in its own transaction
// through WorkerBooks.
package agentstore

import (
	"database/sql"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
)

// queryTexts are the statements of agents.sql and workers.sql.
type queryTexts struct {
	InsertAgent, PulseAgent, ExpiredAgents, EjectAgents, ListAgents, AssignAgent, RemoveAgent, AgentExists string

	InsertWorker, AssignTasks, GrowWorkers, WorkersOfAgent, SettleWorkers, WorkersWithRoom, WorkerIfRoom, ActiveWorkers, DoneWorkers, WorkerByID, AdoptWorker, StopWorkers, WorkerHeads, PruneWorkers string
}

//go:generate go run github.com/exactlyonce/exactlyonce/internal/mysql/querygen queries=queryTexts:agents.sql,workers.sql recoveryQueries=recoveryTexts:recovery.sql

// Store reads and writes the agents and the event workers. Safe for concurrent use; build one per
// process, on the process's core handle.
type Store struct {
	core *mysql.DB
	db   *sql.DB
}

// New returns the Store on db.
func New(db *mysql.DB) *Store { return &Store{core: db, db: db.Pool()} }
