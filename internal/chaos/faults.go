package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// killLoop SIGKILLs a process of the system every KillEvery (jittered) and starts a new one of the
// same role a moment later. The roles take turns (processor, sweeper, API, packer), so that each
// is killed every fourth kill whatever the run's length (a role with no process is skipped); within a role the process is taken at random. The
// contenders are the fault, not the system: they are not killed.
func (r *run) killLoop(ctx context.Context) {
	roles := []string{RoleProcessor, RoleSweeper, RoleAPI, RolePacker}
	for turn := 0; ; turn++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.jitter(r.cfg.KillEvery)):
		}
		r.mu.Lock()
		var victims []int
		for k := range roles {
			role := roles[(turn+k)%len(roles)]
			for i, w := range r.procs {
				if w.role == role {
					victims = append(victims, i)
				}
			}
			if len(victims) > 0 {
				break
			}
		}
		if len(victims) == 0 {
			r.mu.Unlock()
			continue
		}
		i := victims[r.intn(len(victims))]
		w := r.procs[i]
		r.procs = append(r.procs[:i:i], r.procs[i+1:]...)
		switch w.role {
		case RoleProcessor:
			r.report.ProcessorKills++
		case RoleSweeper:
			r.report.SweeperKills++
		case RoleAPI:
			r.report.APIKills++
		case RolePacker:
			r.report.PackerKills++
		}
		r.mu.Unlock()
		w.child.Kill()
		r.retire(w)
		// Back after a pause, as Lambda would start a new execution environment. A killed API's
		// clients meanwhile use another API, or wait for this one's successor.
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(r.intn(800)) * time.Millisecond):
		}
		if err := r.startProcess(w.role); err != nil {
			r.logf("restart %s: %v", w.role, err)
		}
	}
}

// restartLoop restarts the database DBRestarts times, spread over the run, alternately with a
// graceful stop and a kill, each down for 0.5 to 2.5 s.
func (r *run) restartLoop(ctx context.Context) {
	start := time.Now()
	for i := range r.cfg.DBRestarts {
		at := r.cfg.Duration * time.Duration(i+1) / time.Duration(r.cfg.DBRestarts+1)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(start.Add(at))):
		}
		r.dbDown.Store(true)
		var err error
		if i%2 == 0 {
			err = r.server.Stop()
			r.mu.Lock()
			r.report.DBStops++
			r.mu.Unlock()
			r.logf("database stopped")
		} else {
			err = r.server.Kill()
			r.mu.Lock()
			r.report.DBKills++
			r.mu.Unlock()
			r.logf("database killed")
		}
		if err != nil {
			r.logf("database stop: %v", err)
		}
		time.Sleep(500*time.Millisecond + time.Duration(r.intn(2000))*time.Millisecond)
		if err := r.server.Start(); err != nil {
			r.logf("database start: %v\n%s", err, r.server.ErrorLog())
		} else {
			r.logf("database back")
		}
		r.dbDown.Store(false)
	}
}

// poisonLoop sends the malformed messages at random moments of the first half of the run.
func (r *run) poisonLoop(ctx context.Context) {
	for i := range r.cfg.Poison {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(r.intn(int(r.cfg.Duration/time.Duration(2*r.cfg.Poison)) + 1))):
		}
		body := poisonBody(i)
		_, err := r.client.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(r.q.URL), MessageBody: aws.String(body)})
		if err != nil {
			r.logf("inject poison: %v", err)
			continue
		}
		r.mu.Lock()
		r.report.PoisonInjected++
		r.mu.Unlock()
	}
}

// poisonBody returns the i-th malformed message: a mix of corruptions, each unique.
func poisonBody(i int) string {
	kinds := []string{
		`poison %d: not json`,
		`{"id":-%d}`,
		`{"id":"%d"}`,
		`{"id":1,"poison":%d}`,
		`{"id":%d`,
		`{"id":1e%d}`,
	}
	return fmt.Sprintf(kinds[i%len(kinds)], i+1)
}
