package chaos

import (
	"context"
	"net/http"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// lateBlock is the ids a late creator's store reserves at once, and lateEvents how many events it
// creates of them: the first before the ids move on, the others after.
const (
	lateBlock  = 16
	lateEvents = 7
)

// lateLoop is a client whose creates use ids taken long before, as an API's execution
// environment does that reserved a block of ids from the id counter, was frozen while the others
// moved on, and creates with them when it thaws. Round after round, every LateEvery (jittered):
// the ids up to a page nobody has packed are taken (as by processes that reserved them and died:
// a gap, which ids may have), a store of its own reserves a block there and creates one event
// (POST /events' path, Store.CreateProcessed), the counter moves two units and more past it (the
// others' creates), and the store creates the rest of its block's events late, one by one, while
// the packers fold and pack their unit. The checker then finds each of them once, like every
// acknowledged create. Its creates are sync creates to the checker; one whose call failed (the
// database down) may or may not have committed, as one through an API.
func (r *run) lateLoop(ctx context.Context, out chan<- created) {
	db := r.store.DB.Pool()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.jitter(r.cfg.LateEvery)):
		}
		if r.dbDown.Load() {
			continue
		}
		if _, err := db.ExecContext(ctx, "UPDATE status SET id = (id DIV 10000 + 1) * 10000 + ?", r.intn(5000)); err != nil {
			continue
		}
		late, err := wire.StoresOn(db, mysql.Config{BlockSize: lateBlock})
		if err != nil {
			r.logf("late creates: %v", err)
			return
		}
		create := func() bool {
			e, err := late.Events.CreateProcessed(context.Background(), "late")
			if err != nil {
				out <- created{err: err}
				return false
			}
			out <- created{status: http.StatusCreated, id: e.ID, late: true}
			return true
		}
		if !create() {
			continue
		}
		if _, err := db.ExecContext(ctx, "UPDATE status SET id = id + 2000 + ?", r.intn(2000)); err != nil {
			continue
		}
		for range lateEvents - 1 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(r.intn(10_000)) * time.Microsecond):
			}
			if !create() {
				break
			}
		}
	}
}
