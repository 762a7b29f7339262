package mysql

import (
	"context"
	"errors"
)

// KeyedQuestions reads the server's count of statements (the session status Questions, which
// counts the SHOW that reads it) on the connection the store's next keyed group will run on, and
// keeps that connection for it.
func KeyedQuestions(ctx context.Context, s *Store) (int64, error) {
	s.keyed.mu.Lock()
	defer s.keyed.mu.Unlock()
	if len(s.keyed.idle) == 0 {
		return 0, errors.New("no connection kept for keyed creates")
	}
	var name string
	var n int64
	err := s.keyed.idle[len(s.keyed.idle)-1].conn.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Questions'").Scan(&name, &n)
	return n, err
}

// KeptKeyedConns is how many connections the store keeps for keyed creates.
func KeptKeyedConns(s *Store) int {
	s.keyed.mu.Lock()
	defer s.keyed.mu.Unlock()
	return len(s.keyed.idle)
}
