package testutil

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"sync"
)

// DNS is a resolver answering from a table, in process (no packet leaves the test): the Go resolver
// speaks DNS over TCP framing to the net.Pipe its Dial returns. Every name asked is recorded.
type DNS struct {
	answers map[string][]net.IP // by lower-case name with the final dot
	mu      sync.Mutex
	asked   []string
}

// NewDNS returns a DNS answering each name of answers ("host.test", without the final dot) with
// its addresses, A or AAAA as asked, and NXDOMAIN for any other name.
func NewDNS(answers map[string][]string) *DNS {
	d := &DNS{answers: map[string][]net.IP{}}
	for name, addrs := range answers {
		key := strings.ToLower(strings.TrimSuffix(name, ".")) + "."
		for _, a := range addrs {
			ip := net.ParseIP(a)
			if ip == nil {
				panic("testutil: DNS answer " + a + " is not an IP address")
			}
			d.answers[key] = append(d.answers[key], ip)
		}
	}
	return d
}

// Resolver returns a resolver that asks d only.
func (d *DNS) Resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
		client, server := net.Pipe()
		go d.serve(server)
		return client, nil
	}}
}

// Names returns the names asked so far, with their final dot.
func (d *DNS) Names() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.asked...)
}

// serve answers the queries on one stream connection: a 2-byte length, then the message.
func (d *DNS) serve(c net.Conn) {
	defer c.Close()
	for {
		var n uint16
		if binary.Read(c, binary.BigEndian, &n) != nil {
			return
		}
		q := make([]byte, n)
		if _, err := io.ReadFull(c, q); err != nil {
			return
		}
		a := d.answer(q)
		if a == nil {
			return
		}
		if binary.Write(c, binary.BigEndian, uint16(len(a))) != nil {
			return
		}
		if _, err := c.Write(a); err != nil {
			return
		}
	}
}

// answer builds the reply to query q: its id and question, and the table's addresses of the type
// asked (A or AAAA), or NXDOMAIN for a name not in the table.
func (d *DNS) answer(q []byte) []byte {
	if len(q) < 12 {
		return nil
	}
	// The question: labels up to the root, then type and class.
	i := 12
	var labels []string
	for i < len(q) && q[i] != 0 {
		l := int(q[i])
		if i+1+l > len(q) {
			return nil
		}
		labels = append(labels, string(q[i+1:i+1+l]))
		i += 1 + l
	}
	i++
	if i+4 > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[i:])
	question := q[12 : i+4]
	name := strings.ToLower(strings.Join(labels, ".")) + "."
	d.mu.Lock()
	d.asked = append(d.asked, name)
	d.mu.Unlock()

	ips, known := d.answers[name]
	var rrs [][]byte
	for _, ip := range ips {
		var data []byte
		switch {
		case qtype == 1 && ip.To4() != nil:
			data = ip.To4()
		case qtype == 28 && ip.To4() == nil:
			data = ip.To16()
		default:
			continue
		}
		rr := []byte{0xc0, 12} // the name: a pointer to the question's
		rr = binary.BigEndian.AppendUint16(rr, qtype)
		rr = binary.BigEndian.AppendUint16(rr, 1) // class IN
		rr = binary.BigEndian.AppendUint32(rr, 60)
		rr = binary.BigEndian.AppendUint16(rr, uint16(len(data)))
		rrs = append(rrs, append(rr, data...))
	}
	flags := uint16(0x8180) // a response, recursion desired and available, no error
	if !known {
		flags |= 3 // NXDOMAIN
	}
	a := append([]byte(nil), q[0:2]...)
	a = binary.BigEndian.AppendUint16(a, flags)
	a = binary.BigEndian.AppendUint16(a, 1)
	a = binary.BigEndian.AppendUint16(a, uint16(len(rrs)))
	a = append(a, 0, 0, 0, 0)
	a = append(a, question...)
	for _, rr := range rrs {
		a = append(a, rr...)
	}
	return a
}
