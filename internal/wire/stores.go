package wire

import (
	"database/sql"

	"github.com/exactlyonce/exactlyonce/internal/agents"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/counters"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/mysql/agentstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/counterstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/eventstore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/keystore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/pagestore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/taskstore"
	"github.com/exactlyonce/exactlyonce/internal/processing"
	"github.com/exactlyonce/exactlyonce/internal/sweeping"
)

// Stores are the stores of one process, every one built on one core handle: one pool, one id
// allocator, one set of retry counters.
type Stores struct {
	DB       *mysql.DB
	Events   *eventstore.Store
	Tasks    *taskstore.Store
	Keys     *keystore.Store
	Counters *counterstore.Store
	Agents   *agentstore.Store
	Pages    *pagestore.Store
}

// NewStores builds every store on db.
func NewStores(db *mysql.DB) *Stores {
	return &Stores{DB: db, Events: eventstore.New(db), Tasks: taskstore.New(db), Keys: keystore.New(db),
		Counters: counterstore.New(db), Agents: agentstore.New(db), Pages: pagestore.New(db)}
}

// WithArchive makes every store read the packed history's archive a as well (pagestore.History),
// and the page store move pages to it (the sweeper's maintenance), and returns s. nil: no archive.
func (s *Stores) WithArchive(a pagestore.Archive) *Stores {
	if a == nil {
		return s
	}
	s.Pages = s.Pages.WithArchive(a)
	s.Events.WithHistory(s.Pages.History())
	s.Tasks.WithHistory(s.Pages.History())
	return s
}

// StoresOn builds the core handle on pool (mysql.New, with cfg) and every store on it: for a
// caller that opened and migrated the pool itself (the benchmark, the chaos run, tests).
func StoresOn(pool *sql.DB, cfg mysql.Config) (*Stores, error) {
	db, err := mysql.New(pool, cfg)
	if err != nil {
		return nil, err
	}
	return NewStores(db), nil
}

// API returns the API's stores (api.Server.Stores): every one.
func (s *Stores) API() api.Stores {
	return api.Stores{Events: s.Events, Console: s.Events, Tasks: s.Tasks, Keys: s.Keys, Counters: s.Counters,
		Agents: s.Agents, Workers: s.Agents, History: s.Events}
}

// Sweeping returns a sweeper's stores (sweeping.New): every one, so that its maintenance folds,
// packs, prunes keys and sweeps the counter service.
func (s *Stores) Sweeping() sweeping.Stores {
	return sweeping.Stores{Events: s.Events, Tasks: s.Tasks, Folder: s.Events, Packer: s.Pages, Archiver: s.Pages, Keys: s.Keys,
		Counters: s.Counters, Waiting: s.Events, Workers: s.Agents, Agents: s.Agents, Directory: s.Tasks}
}

// Each store says here, at compile time, that it is what every consumer it serves declares it
// needs: a method renamed or changed in a store fails the build here, where before a capability
// found missing at run time turned its step off. This is the one place for these checks: wire is
// where the stores and their consumers meet, and no store package imports a consumer.
var (
	_ api.EventStore         = (*eventstore.Store)(nil)
	_ api.ConsoleStore       = (*eventstore.Store)(nil)
	_ api.HistoryReader      = (*eventstore.Store)(nil)
	_ processing.Store       = (*eventstore.Store)(nil)
	_ sweeping.Folder        = (*eventstore.Store)(nil)
	_ sweeping.Directory     = (*taskstore.Store)(nil)
	_ sweeping.Waiting       = (*eventstore.Store)(nil)
	_ api.TaskStore          = (*taskstore.Store)(nil)
	_ processing.TaskStore   = (*taskstore.Store)(nil)
	_ api.KeyStore           = (*keystore.Store)(nil)
	_ sweeping.KeyPruner     = (*keystore.Store)(nil)
	_ api.CounterReader      = (*counterstore.Store)(nil)
	_ counters.Store         = (*counterstore.Store)(nil)
	_ sweeping.CounterStore  = (*counterstore.Store)(nil)
	_ agents.Store           = (*agentstore.Store)(nil)
	_ api.AgentLister        = (*agentstore.Store)(nil)
	_ api.WorkerLister       = (*agentstore.Store)(nil)
	_ processing.WorkerStore = (*agentstore.Store)(nil)
	_ sweeping.Packer        = (*pagestore.Store)(nil)
	_ sweeping.Archiver      = (*pagestore.Store)(nil)
)
