-- agents: one row per live agent (migrations/0007_agents.sql). No index: every statement scans the
-- table, which holds a handful of rows. Every statement that writes is its own short transaction
-- (autocommit, or RegisterAgent's with the counter), at READ COMMITTED: an UPDATE or DELETE then
-- reads the last committed version of a row another agent holds locked (semi-consistent read) and
-- waits only if that version matches its WHERE, so agents pulsing at once do not wait for each
-- other. The pulse's own update and the ejection of others are never one transaction: mixed, two
-- agents each holding their own row and wanting the other's would deadlock (Hibernate Search's
-- outbox-polling documents it).

-- name: InsertAgent
-- Registers an agent, WAITING, with the id just taken from the status counter in the same
-- transaction (LockCounter, AdvanceCounter): nobody else can take that id, so ids are unique
-- without a unique index. Its expiration is the database's clock plus the expiration interval
-- (microseconds). Static agents register with their assignment, dynamic ones and the processors'
-- agents without a range (sharding 'none', which the others leave out of their topology) with NULL.
INSERT INTO agents (id, name, kind, sharding, state, total_shard_count, assigned_shard_index,
                    expiration, created_at, last_pulse_at)
VALUES (?, ?, ?, ?, 'WAITING', ?, ?, NOW(6) + INTERVAL ? MICROSECOND, NOW(6), NOW(6));

-- name: PulseAgent
-- The pulse, first step, a transaction that does nothing else: pushes the agent's own expiration
-- forward on the database's clock. It locks only its own row (the others do not match and, at
-- READ COMMITTED, are released at once). No row changed means the agent was ejected (its row
-- deleted): it must register again before it processes anything.
UPDATE agents SET expiration = NOW(6) + INTERVAL ? MICROSECOND, last_pulse_at = NOW(6)
WHERE id = ?
LIMIT 1;

-- name: ExpiredAgents
-- The pulse, second step: which other agents have expired on the database's clock. A consistent
-- (non-locking) read: it takes no lock and waits for none.
SELECT id, name FROM agents WHERE expiration < NOW(6) AND id <> ?;

-- name: EjectAgents
-- Deletes the named expired agents, in a transaction of its own. The expiration is checked again
-- under the row lock the DELETE takes, so an agent that pulsed since ExpiredAgents read it is not
-- ejected; an agent pulsing at this instant holds its row's lock, and the DELETE waits for that
-- short transaction and then finds the row unexpired. The IN list is expanded to one ? per id.
DELETE FROM agents WHERE expiration < NOW(6) AND id IN (/*ids*/);

-- name: ListAgents
-- Every agent, ordered by id (registration order), with the database's clock: a consistent
-- (non-locking) read, for the pulse's topology check and GET /agents.
SELECT id, name, kind, sharding, state, total_shard_count, assigned_shard_index,
       expiration, created_at, last_pulse_at, NOW(6)
FROM agents ORDER BY id;

-- name: AssignAgent
-- Persists the agent's state and assignment (WAITING with its new target, RUNNING once every
-- member agrees, SUSPENDED on a conflict): an autocommit UPDATE of its own row only.
UPDATE agents SET state = ?, total_shard_count = ?, assigned_shard_index = ?
WHERE id = ?
LIMIT 1;

-- name: RemoveAgent
-- An agent leaving (SIGTERM, the end of a sweeper's invocation): deletes its own row, so that the
-- others take its range at their next pulse instead of after its expiration. Locks its own row only.
DELETE FROM agents WHERE id = ?
LIMIT 1;

-- name: AgentExists
-- Whether the agent still has its row, after an AssignAgent that changed nothing. A consistent
-- (non-locking) read.
SELECT COUNT(*) FROM agents WHERE id = ?;
