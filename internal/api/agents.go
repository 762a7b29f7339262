package api

import (
	"context"
	"net/http"
	"time"

	"github.com/exactlyonce/exactlyonce"
)

// AgentLister is what GET /agents needs of the agents' store (internal/mysql/agentstore implements
// it). A Server without one answers GET /agents with an empty list.
type AgentLister interface {
	Agents(ctx context.Context) ([]exactlyonce.Agent, error)
}

// AgentJSON is an agent as GET /agents shows it. Times are the database's clock.
type AgentJSON struct {
	ID                 int64     `json:"id"`
	Name               string    `json:"name"`
	Kind               string    `json:"kind"`     // what runs it: standalone, sweeper, processor, ...
	Sharding           string    `json:"sharding"` // dynamic, static, or none (a processor's agent: no range)
	State              string    `json:"state"`
	TotalShardCount    *int      `json:"totalShardCount"`
	AssignedShardIndex *int      `json:"assignedShardIndex"`
	Expiration         time.Time `json:"expiration"`
	CreatedAt          time.Time `json:"createdAt"`
	LastPulseAt        time.Time `json:"lastPulseAt"`
}

// listAgents is GET /agents: the registered agents ordered by id, by a consistent read. An agent
// whose expiration has passed is listed until another agent's pulse ejects it.
func (s *Server) listAgents(w http.ResponseWriter, r *http.Request) {
	out := struct {
		Agents []AgentJSON `json:"agents"`
	}{Agents: []AgentJSON{}}
	if s.Agents != nil {
		as, err := s.Agents.Agents(r.Context())
		if err != nil {
			s.error(w, r, err)
			return
		}
		for _, a := range as {
			out.Agents = append(out.Agents, AgentJSON{ID: a.ID, Name: a.Name, Kind: a.Kind, Sharding: string(a.Sharding), State: string(a.State),
				TotalShardCount: a.TotalShardCount, AssignedShardIndex: a.AssignedShardIndex,
				Expiration: a.Expiration, CreatedAt: a.CreatedAt, LastPulseAt: a.LastPulseAt})
		}
	}
	writeJSON(w, http.StatusOK, out)
}
