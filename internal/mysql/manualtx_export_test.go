package mysql

import (
	"context"
	"errors"
)

// ManualQuestions reads the server's count of statements (the session status Questions, which
// counts the SHOW that reads it) on the connection d's next InManualTx will run on (a keyed
// group's), and keeps that connection for it.
func ManualQuestions(ctx context.Context, d *DB) (int64, error) {
	m := d.manual
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.idle) == 0 {
		return 0, errors.New("no connection kept for keyed creates")
	}
	var name string
	var n int64
	err := m.idle[len(m.idle)-1].conn.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Questions'").Scan(&name, &n)
	return n, err
}

// KeptManualConns is how many connections d keeps for InManualTx (the keyed creates').
func KeptManualConns(d *DB) int {
	d.manual.mu.Lock()
	defer d.manual.mu.Unlock()
	return len(d.manual.idle)
}
