package chaos

import (
	"context"
	"net/http"
	"time"
)

// maxReplays bounds the keys checkKeys sends again at the end.
const maxReplays = 200

// checkKeys checks the creates sent with an Idempotency-Key (Config.KeyEvery): each was
// acknowledged, whatever was killed or restarted while it was sent again; the keys' table holds
// each key once, naming the event its client was told; and the key sent once more is answered as
// the first time (the same status and id). A key that made two events (a retry that did not find
// its first attempt's commit) shows as a key stored twice, or as a stored key naming an event no
// client was told, and as an event nobody was told about.
func (r *run) checkKeys(ctx context.Context, collected []created, acked map[int64]bool, violate func(string, ...any)) {
	rep := &r.report
	var keyed []created
	for _, c := range collected {
		if c.key == "" {
			continue
		}
		switch {
		case c.unfinished:
			violate("the create with key %s was never acknowledged (%d attempts, the last answered %d, %v)", c.key, c.attempts, c.status, c.err)
		case c.err != nil || (c.status != http.StatusCreated && c.status != http.StatusAccepted) || c.id <= 0:
			violate("the create with key %s ended with %d (id %d, %v)", c.key, c.status, c.id, c.err)
		default:
			rep.KeyedCreates++
			rep.KeyedResends += c.attempts - 1
			keyed = append(keyed, c)
		}
	}

	db := r.store.DB.Pool()
	rows, err := db.QueryContext(ctx, "SELECT HEX(key_hash), COUNT(*), GROUP_CONCAT(event_id ORDER BY event_id) FROM idempotency_keys GROUP BY key_hash HAVING COUNT(*) > 1")
	if err != nil {
		violate("read the stored keys: %v", err)
		return
	}
	for rows.Next() {
		var hash, events string
		var n int
		if err := rows.Scan(&hash, &n, &events); err != nil {
			violate("read the stored keys: %v", err)
			break
		}
		violate("key %s is stored %d times (events %s)", hash, n, events)
	}
	rows.Close()
	rows, err = db.QueryContext(ctx, "SELECT event_id FROM idempotency_keys")
	if err != nil {
		violate("read the stored keys: %v", err)
		return
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			violate("read the stored keys: %v", err)
			break
		}
		if _, ok := acked[id]; !ok {
			violate("a stored key names event %d, which no client was told", id)
		}
	}
	rows.Close()

	// Replays, through a live API: the same status and id.
	hc := &http.Client{Timeout: 30 * time.Second}
	for i, c := range keyed {
		if i == maxReplays {
			break
		}
		apiURL, _ := r.apiURL()
		status, id, err := keyedPost(hc, apiURL, &c)
		if err != nil || status != c.status || id != c.id {
			violate("the key %s sent again was answered %d with id %d (%v); the first time %d with id %d", c.key, status, id, err, c.status, c.id)
			continue
		}
		rep.KeyReplays++
	}
	if len(keyed) > 0 {
		r.logf("%d keyed creates acknowledged, %d replayed", len(keyed), rep.KeyReplays)
	}
}
