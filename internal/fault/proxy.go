package fault

import (
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	drv "github.com/go-sql-driver/mysql"
)

// Proxy is a TCP proxy on loopback between the application and a MySQL server, which the test
// controls: it cuts every open connection (a network failure, a failover), refuses new ones (the
// database unreachable), or lets a commit reach the server and cuts the client before the reply
// comes back (the commit happened; the client cannot know): the next COMMIT's
// (LoseCommitReplies), or that of a given statement's write, whether it commits by itself in
// autocommit or with its transaction (LoseRepliesCommitting). Only the client-to-server direction
// is parsed, and only to frame MySQL packets (3 bytes of length, 1 of sequence, the payload) and to
// read the text of COM_QUERY packets (the store sends no prepared statements).
type Proxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	links    map[*link]struct{}
	refusing bool

	loseCommitReplies    atomic.Int32
	loseStatementReplies atomic.Int32
	statementPrefix      atomic.Pointer[string]

	// Cut counts connections the proxy cut; Refused, connections it refused; LostCommitReplies,
	// commits the server ran whose reply the client never got (LoseCommitReplies);
	// LostStatementReplies, the same for the statements armed with LoseRepliesCommitting.
	Cut, Refused, LostCommitReplies, LostStatementReplies atomic.Int64
}

type link struct {
	client, server net.Conn
	once           sync.Once
}

func (l *link) close() {
	l.once.Do(func() {
		l.client.Close()
		l.server.Close()
	})
}

// NewProxy listens on a free loopback port and forwards to target (host:port).
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, links: map[*link]struct{}{}}
	go p.serve()
	return p, nil
}

// StartProxy returns a proxy to target for one test, closed when it ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := NewProxy(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// Addr is where the proxy listens.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// DSN returns dsn with its address replaced by the proxy's.
func (p *Proxy) DSN(dsn string) string {
	cfg, err := drv.ParseDSN(dsn)
	if err != nil {
		panic(err)
	}
	cfg.Addr = p.Addr()
	return cfg.FormatDSN()
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refusing := p.refusing
		p.mu.Unlock()
		if refusing {
			p.Refused.Add(1)
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		l := &link{client: c, server: s}
		p.mu.Lock()
		p.links[l] = struct{}{}
		p.mu.Unlock()
		go p.pipe(l)
	}
}

func (p *Proxy) pipe(l *link) {
	defer func() {
		l.close()
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	swallow := make(chan struct{}) // closed when the next server reply must not reach the client
	var lost *atomic.Int64         // the counter of the reply swallowed; set before swallow is closed
	var swallowOnce sync.Once
	lose := func(counter *atomic.Int64) {
		swallowOnce.Do(func() { lost = counter; close(swallow) })
	}
	done := make(chan struct{})
	go func() { // server -> client
		defer close(done)
		buf := make([]byte, 32<<10)
		var dropped []byte // the swallowed reply so far
		for {
			n, err := l.server.Read(buf)
			if n > 0 {
				select {
				case <-swallow:
					// The commit's reply: drop it, and cut the client once the server has sent all
					// of it, so that every statement of a multi-statement text has run (the server
					// sends each statement's result as it goes, the COMMIT's last).
					dropped = append(dropped, buf[:n]...)
					if replyComplete(dropped) {
						lost.Add(1)
						l.close()
						return
					}
					continue
				default:
				}
				if _, werr := l.client.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	// client -> server, packet by packet. inTx: a transaction is open on this connection (it sent
	// START TRANSACTION or BEGIN, and no COMMIT or ROLLBACK since); manual: its session has
	// autocommit off (SET autocommit = 0), so every statement is in a transaction that only a
	// COMMIT commits; loseAtCommit: an armed statement ran in it, so its COMMIT's reply is the one
	// to lose.
	var header [4]byte
	inTx, manual, loseAtCommit := false, false, false
	for {
		if _, err := io.ReadFull(l.client, header[:]); err != nil {
			break
		}
		size := int(header[0]) | int(header[1])<<8 | int(header[2])<<16
		payload := make([]byte, size)
		if _, err := io.ReadFull(l.client, payload); err != nil {
			break
		}
		for _, q := range statements(payload) {
			switch {
			case hasPrefixFold(q, "START TRANSACTION") || hasPrefixFold(q, "BEGIN"):
				inTx, loseAtCommit = true, false
			case autocommitSet(q, "0"):
				manual = true
			case autocommitSet(q, "1"): // commits the open transaction, if any, as COMMIT would
				if loseAtCommit {
					lose(&p.LostStatementReplies)
				}
				manual, inTx, loseAtCommit = false, false, false
			case strings.EqualFold(q, "COMMIT"):
				if loseAtCommit {
					lose(&p.LostStatementReplies)
				} else if p.takeCommitLoss() {
					lose(&p.LostCommitReplies)
				}
				inTx, loseAtCommit = false, false
			case strings.EqualFold(q, "ROLLBACK"):
				if loseAtCommit { // nothing committed: the loss stays armed for the next one
					p.loseStatementReplies.Add(1)
				}
				inTx, loseAtCommit = false, false
			case p.takeStatementLoss(q):
				if inTx || manual {
					loseAtCommit = true
				} else { // autocommit: this statement's reply is its commit's
					lose(&p.LostStatementReplies)
				}
			}
		}
		if _, err := l.server.Write(append(header[:], payload...)); err != nil {
			break
		}
	}
	l.close()
	<-done
}

// autocommitSet tells whether q sets the session's autocommit to value ("0" or "1").
func autocommitSet(q, value string) bool {
	q = strings.ToLower(strings.Join(strings.Fields(q), ""))
	return q == "setautocommit="+value || q == "setsessionautocommit="+value || q == "set@@session.autocommit="+value
}

// statements returns the statements of a COM_QUERY packet, trimmed: one, or several for a
// multi-statement text, which the store writes with ";\n" between its statements (a create's
// transaction in one round trip).
func statements(payload []byte) []string {
	const comQuery = 0x03
	if len(payload) < 2 || payload[0] != comQuery {
		return nil
	}
	var out []string
	for _, q := range strings.Split(string(payload[1:]), ";\n") {
		if q = strings.TrimSuffix(strings.TrimSpace(q), ";"); q != "" {
			out = append(out, q)
		}
	}
	return out
}

// replyComplete tells whether b holds a whole reply to a text of statements that return no rows:
// packets up to an ERR packet, or an OK packet without SERVER_MORE_RESULTS_EXISTS (the last
// statement's).
func replyComplete(b []byte) bool {
	const moreResults = 0x0008
	for len(b) >= 4 {
		size := int(b[0]) | int(b[1])<<8 | int(b[2])<<16
		if len(b) < 4+size {
			return false
		}
		pkt := b[4 : 4+size]
		b = b[4+size:]
		switch {
		case len(pkt) > 0 && pkt[0] == 0xff: // ERR: the text stops here
			return true
		case len(pkt) > 0 && pkt[0] == 0x00: // OK: affected rows, last insert id, then the status
			rest := pkt[1:]
			for range 2 {
				rest = skipLenEnc(rest)
			}
			if len(rest) >= 2 && (int(rest[0])|int(rest[1])<<8)&moreResults == 0 {
				return true
			}
		}
	}
	return false
}

// skipLenEnc skips one length-encoded integer.
func skipLenEnc(b []byte) []byte {
	if len(b) == 0 {
		return b
	}
	switch {
	case b[0] < 0xfb:
		return b[1:]
	case b[0] == 0xfc && len(b) >= 3:
		return b[3:]
	case b[0] == 0xfd && len(b) >= 4:
		return b[4:]
	case b[0] == 0xfe && len(b) >= 9:
		return b[9:]
	}
	return nil
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

func (p *Proxy) takeStatementLoss(q string) bool {
	prefix := p.statementPrefix.Load()
	if prefix == nil || !hasPrefixFold(q, *prefix) {
		return false
	}
	return takeOne(&p.loseStatementReplies)
}

func (p *Proxy) takeCommitLoss() bool { return takeOne(&p.loseCommitReplies) }

// takeOne decrements n if it is positive, and tells whether it did.
func takeOne(n *atomic.Int32) bool {
	for {
		v := n.Load()
		if v <= 0 {
			return false
		}
		if n.CompareAndSwap(v, v-1) {
			return true
		}
	}
}

// LoseCommitReplies arms the proxy to let the next n COMMITs through to the server and cut their
// clients before the server's reply reaches them.
func (p *Proxy) LoseCommitReplies(n int) { p.loseCommitReplies.Add(int32(n)) }

// LoseRepliesCommitting arms the proxy to lose the commit's reply of the next n statements whose
// text begins with prefix (case-insensitive), e.g. "INSERT INTO events": a statement sent in
// autocommit commits by itself, so its own reply is lost, after the server has run it; one sent
// inside a transaction (START TRANSACTION or BEGIN on its connection) is committed by the COMMIT
// that ends it, whose reply is lost instead (a ROLLBACK commits nothing and leaves the loss armed).
// Either way the write is committed and the client, cut off, cannot know. A new prefix replaces
// the previous one.
func (p *Proxy) LoseRepliesCommitting(prefix string, n int) {
	p.statementPrefix.Store(&prefix)
	p.loseStatementReplies.Add(int32(n))
}

// CutAll closes every open connection, both ways, and returns how many it cut.
func (p *Proxy) CutAll() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
	p.Cut.Add(int64(len(links)))
	return len(links)
}

// SetRefusing makes the proxy close every new connection at once (true) or forward them again.
func (p *Proxy) SetRefusing(refusing bool) {
	p.mu.Lock()
	p.refusing = refusing
	p.mu.Unlock()
}

// Close stops listening and cuts every connection.
func (p *Proxy) Close() {
	p.ln.Close()
	p.CutAll()
}
