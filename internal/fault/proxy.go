package fault

import (
	"bytes"
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
// database unreachable), or lets a COMMIT reach the server and cuts the client before the reply
// comes back (the commit happened; the client cannot know). Only the client-to-server direction is
// parsed, and only to frame MySQL packets: 3 bytes of length, 1 of sequence, the payload.
type Proxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	links    map[*link]struct{}
	refusing bool

	loseCommitReplies atomic.Int32

	// Cut counts connections the proxy cut; Refused, connections it refused; LostCommitReplies,
	// commits the server ran whose reply the client never got.
	Cut, Refused, LostCommitReplies atomic.Int64
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
	var swallowOnce sync.Once
	done := make(chan struct{})
	go func() { // server -> client
		defer close(done)
		buf := make([]byte, 32<<10)
		for {
			n, err := l.server.Read(buf)
			if n > 0 {
				select {
				case <-swallow:
					// The COMMIT's reply: the server has committed. Drop it and cut the client.
					p.LostCommitReplies.Add(1)
					l.close()
					return
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
	// client -> server, packet by packet.
	var header [4]byte
	for {
		if _, err := io.ReadFull(l.client, header[:]); err != nil {
			break
		}
		size := int(header[0]) | int(header[1])<<8 | int(header[2])<<16
		payload := make([]byte, size)
		if _, err := io.ReadFull(l.client, payload); err != nil {
			break
		}
		if isCommit(payload) && p.takeCommitLoss() {
			swallowOnce.Do(func() { close(swallow) })
		}
		if _, err := l.server.Write(append(header[:], payload...)); err != nil {
			break
		}
	}
	l.close()
	<-done
}

// isCommit tells whether a client packet is COM_QUERY "COMMIT".
func isCommit(payload []byte) bool {
	const comQuery = 0x03
	return len(payload) > 1 && payload[0] == comQuery &&
		strings.EqualFold(string(bytes.TrimSpace(payload[1:])), "COMMIT")
}

func (p *Proxy) takeCommitLoss() bool {
	for {
		n := p.loseCommitReplies.Load()
		if n <= 0 {
			return false
		}
		if p.loseCommitReplies.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// LoseCommitReplies arms the proxy to let the next n COMMITs through to the server and cut their
// clients before the server's reply reaches them.
func (p *Proxy) LoseCommitReplies(n int) { p.loseCommitReplies.Add(int32(n)) }

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
