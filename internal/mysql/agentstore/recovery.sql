-- Bounded reads of the event workers' registry (recovery.go): what an agent's pulse needs to adopt
-- the workers of agents that are gone and to forget its own done ones, and GET /workers' pages.
-- None reads every live worker's references: each returns at most a batch of rows (the caller's
-- LIMIT, or the ids it names), and the references only of the workers it returns, so that a pulse
-- or a listing costs a batch however many workers are live. Each is a consistent read of one
-- partition (`is_done = 0` or `= 1`), no lock; with no index each still scans its partition, whose
-- size is the live workers (or the retained history, for the done listing), reading the rows'
-- narrow columns only: a worker's references (reference_ids, up to max_reference_count strings)
-- are read only where a statement names that column.

-- name: OrphanWorkers
-- Recovery at a pulse: up to ? live workers whose agent is none of the live agents (/*live*/, the
-- recovering agent first) and whose first reference's hash is in the recovering agent's range,
-- oldest first; their ids and agents only. Those adopted are the adopter's at the next pulse, so
-- the next batch is the next orphans'.
SELECT worker_id, agent_id FROM event_workers
WHERE is_done = 0 AND agent_id NOT IN (/*live*/) AND first_hash BETWEEN ? AND ?
ORDER BY created_at, worker_id LIMIT ?;

-- name: AdoptedWorker
-- Recovery, once an adoption changed the row: the adopted worker's references and will_terminate,
-- read only while it is live and the adopter's.
SELECT reference_ids, will_terminate FROM event_workers WHERE is_done = 0 AND worker_id = ? AND agent_id = ? LIMIT 1;

-- name: LiveWorkerIDs
-- Which of an agent's willTerminate workers (/*ids*/, at most a batch) are still live: the others
-- are done, and the agent forgets them.
SELECT worker_id FROM event_workers WHERE is_done = 0 AND worker_id IN (/*ids*/);

-- name: ActiveWorkerSizes
-- GET /workers: the next ? live workers after the cursor (created_at, worker_id), oldest first,
-- with the length of their references, so that the page reads the references of as many as fit in
-- its bytes.
SELECT worker_id, created_at, LENGTH(reference_ids) FROM event_workers
WHERE is_done = 0 AND (created_at > ? OR (created_at = ? AND worker_id > ?))
ORDER BY created_at, worker_id LIMIT ?;

-- name: DoneWorkerSizes
-- GET /workers: the next ? done workers after the cursor (done_at, worker_id), the most recently
-- done first, with the length of their references.
SELECT worker_id, done_at, LENGTH(reference_ids) FROM event_workers
WHERE is_done = 1 AND (done_at < ? OR (done_at = ? AND worker_id > ?))
ORDER BY done_at DESC, worker_id LIMIT ?;

-- name: WorkersByID
-- GET /workers: the rows of the workers a page takes (/*ids*/, at most a batch), in one partition.
SELECT worker_id, agent_id, created_at, last_completed_task, tasks_remaining, will_terminate, tasks_completed,
  tasks_failed, max_reference_count, is_done, reference_ids, first_hash
FROM event_workers WHERE is_done = ? AND worker_id IN (/*ids*/);
