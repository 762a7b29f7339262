package agentstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
)

// The agents table (agents.sql): registration, pulse, ejection, assignment, leaving. The
// coordination itself (when to pulse, what the assignment is, when to run) is internal/agents'.

// RegisterAgent inserts a new agent, WAITING, expiring after expiration on the database's clock,
// and returns it. Its id is taken from the status counter under its row lock in the same
// transaction, so it is unique, and larger than every id taken before (ordering agents by id
// orders them by registration).
func (s *Store) RegisterAgent(ctx context.Context, spec exactlyonce.AgentSpec, expiration time.Duration) (exactlyonce.Agent, error) {
	var id int64
	err := s.core.InTx(ctx, func(tx *sql.Tx) error {
		var err error
		if id, err = mysql.AdvanceCounter(ctx, tx, 1); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, queries.InsertAgent, id, truncate(spec.Name, 64), truncate(spec.Kind, 16),
			string(spec.Sharding), spec.Total, spec.Index, expiration.Microseconds())
		return err
	})
	if err != nil {
		return exactlyonce.Agent{}, mysql.Interpret("register agent", err)
	}
	return exactlyonce.Agent{ID: id, Name: spec.Name, Kind: spec.Kind, Sharding: spec.Sharding,
		State: exactlyonce.AgentWaiting, TotalShardCount: spec.Total, AssignedShardIndex: spec.Index}, nil
}

// PulseAgent pushes agent id's expiration to expiration from now, on the database's clock, in a
// transaction that does nothing else. false means the agent has no row: it was ejected.
func (s *Store) PulseAgent(ctx context.Context, id int64, expiration time.Duration) (bool, error) {
	res, err := s.db.ExecContext(ctx, queries.PulseAgent, expiration.Microseconds(), id)
	if err != nil {
		return false, mysql.Interpret("pulse agent", err)
	}
	n, err := res.RowsAffected()
	return n == 1, mysql.Interpret("pulse agent", err)
}

// EjectExpiredAgents deletes the agents other than self whose expiration has passed on the
// database's clock, in a transaction of its own, and returns those it deleted.
func (s *Store) EjectExpiredAgents(ctx context.Context, self int64) ([]exactlyonce.Agent, error) {
	rows, err := s.db.QueryContext(ctx, queries.ExpiredAgents, self)
	if err != nil {
		return nil, mysql.Interpret("read expired agents", err)
	}
	var expired []exactlyonce.Agent
	for rows.Next() {
		var a exactlyonce.Agent
		if err := rows.Scan(&a.ID, &a.Name); err != nil {
			rows.Close()
			return nil, mysql.Interpret("read expired agents", err)
		}
		expired = append(expired, a)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(expired) == 0 {
		return nil, mysql.Interpret("read expired agents", err)
	}
	ids := make([]int64, len(expired))
	for i, a := range expired {
		ids[i] = a.ID
	}
	q, args := mysql.ExpandIDs(queries.EjectAgents, ids)
	var n int64
	err = s.core.InTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return nil, mysql.Interpret("eject expired agents", err)
	}
	if n < int64(len(expired)) {
		// Some pulsed (or left) in between; the caller only logs the list, which then says more
		// than was deleted. Read again to be exact.
		still, err := s.Agents(ctx)
		if err != nil {
			return nil, err
		}
		live := map[int64]bool{}
		for _, a := range still {
			live[a.ID] = true
		}
		out := expired[:0]
		for _, a := range expired {
			if !live[a.ID] {
				out = append(out, a)
			}
		}
		expired = out
	}
	return expired, nil
}

// Agents returns every registered agent ordered by id, and the database's clock at the read, by a
// consistent read without locks.
func (s *Store) Agents(ctx context.Context) ([]exactlyonce.Agent, error) {
	out, _, err := s.AgentsAt(ctx)
	return out, err
}

// AgentsAt is Agents with the database's clock at the read.
func (s *Store) AgentsAt(ctx context.Context) ([]exactlyonce.Agent, time.Time, error) {
	rows, err := s.db.QueryContext(ctx, queries.ListAgents)
	if err != nil {
		return nil, time.Time{}, mysql.Interpret("list agents", err)
	}
	defer rows.Close()
	var (
		out []exactlyonce.Agent
		now time.Time
	)
	for rows.Next() {
		var (
			a            exactlyonce.Agent
			total, index sql.NullInt64
		)
		if err := rows.Scan(&a.ID, &a.Name, &a.Kind, &a.Sharding, &a.State, &total, &index,
			&a.Expiration, &a.CreatedAt, &a.LastPulseAt, &now); err != nil {
			return nil, time.Time{}, mysql.Interpret("list agents", err)
		}
		if total.Valid {
			a.TotalShardCount = new(int(total.Int64))
		}
		if index.Valid {
			a.AssignedShardIndex = new(int(index.Int64))
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, mysql.Interpret("list agents", err)
	}
	return out, now, nil
}

// AssignAgent persists agent id's state and assignment (nil: none). false means the agent has no
// row: it was ejected.
func (s *Store) AssignAgent(ctx context.Context, id int64, state exactlyonce.AgentState, total, index *int) (bool, error) {
	switch state {
	case exactlyonce.AgentWaiting, exactlyonce.AgentRunning, exactlyonce.AgentSuspended:
	default:
		return false, fmt.Errorf("assign agent %d: unknown state %q", id, state)
	}
	res, err := s.db.ExecContext(ctx, queries.AssignAgent, string(state), total, index, id)
	if err != nil {
		return false, mysql.Interpret("assign agent", err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 1 {
		return n == 1, mysql.Interpret("assign agent", err)
	}
	// RowsAffected counts changed rows: an assignment written again unchanged counts 0, so whether
	// the row exists is read, not inferred.
	var n int
	if err := s.db.QueryRowContext(ctx, queries.AgentExists, id).Scan(&n); err != nil {
		return false, mysql.Interpret("assign agent", err)
	}
	return n == 1, nil
}

// RemoveAgent deletes agent id's row: it leaves, and the others take its range at their next pulse.
func (s *Store) RemoveAgent(ctx context.Context, id int64) error {
	_, err := s.db.ExecContext(ctx, queries.RemoveAgent, id)
	return mysql.Interpret("remove agent", err)
}

// truncate cuts s to at most n characters, as a VARCHAR(n) column counts them, and never inside
// one: the database refuses a string with a partial (or any invalid) UTF-8 sequence, so a name cut
// at a byte count inside a character could never be registered. Invalid bytes become U+FFFD.
func truncate(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	i := 0
	for at := range s {
		if i == n {
			return s[:at]
		}
		i++
	}
	return s
}
