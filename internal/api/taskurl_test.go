package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/openapitest"
	"github.com/exactlyonce/exactlyonce/internal/testdb"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/stretchr/testify/require"
)

// taskURLHosts are url hosts (as written in a url) and the setting that allows a delivery to them.
var taskURLHosts = []struct{ host, allowedBy string }{
	// The examples.
	{"169.254.169.254", "nothing"},
	{"10.0.0.1", "private"},
	{"0x7f.1", "nothing"}, // a numeric form resolvers disagree on: refused whatever it means
	{"[::ffff:169.254.169.254]", "nothing"},
	{"100.64.0.1", "nothing"},
	{"[fe80::1]", "nothing"},
	// More of the same.
	{"[fe80::1%25eth0]", "nothing"},
	{"0.0.0.0", "nothing"},
	{"[::]", "nothing"},
	{"127.1", "nothing"},
	{"2130706433", "nothing"},
	{"0177.0.0.1", "nothing"},
	{"10.1", "nothing"},
	{"134744072", "nothing"}, // 8.8.8.8, but not written as such
	{"224.0.0.1", "nothing"},
	{"255.255.255.255", "nothing"},
	{"240.0.0.1", "nothing"},
	{"[::127.0.0.1]", "nothing"},
	{"[64:ff9b::7f00:1]", "nothing"},
	{"[2002:7f00:1::]", "nothing"},
	{"[ff02::1]", "nothing"},
	{"127.0.0.1", "loopback"},
	{"127.0.0.2:8080", "loopback"},
	{"[::1]", "loopback"},
	{"[::ffff:127.0.0.1]", "loopback"},
	{"172.16.0.1", "private"},
	{"192.168.1.1:8443", "private"},
	{"[fc00::1]", "private"},
	{"[fd12:3456::1]", "private"},
	{"[::ffff:10.0.0.1]", "private"},
	// The metadata endpoints, in every form: refused whatever the settings.
	{"169.254.169.254.", "nothing"},
	{"[::ffff:a9fe:a9fe]", "nothing"},
	{"[::a9fe:a9fe]", "nothing"},
	{"[::169.254.169.254]", "nothing"},
	{"[64:ff9b::a9fe:a9fe]", "nothing"},
	{"[2002:a9fe:a9fe::]", "nothing"},
	{"2852039166", "nothing"},
	{"0xa9fe.0xa9fe", "nothing"},
	{"0xa9fea9fe", "nothing"},
	{"0xA9.0xFE.0xA9.0xFE", "nothing"},
	{"0251.0376.0251.0376", "nothing"},
	{"169.254.43518", "nothing"},
	{"[fd00:ec2::254]", "nothing"},
	{"[fd00:ec2::253]", "nothing"},
	{"[fd20:ce::254]", "nothing"},
	{"100.100.100.200", "nothing"},
	{"[::ffff:100.100.100.200]", "nothing"},
	{"192.0.0.192", "nothing"},
	{"169.254.169.123", "nothing"},
	{"[fe80::a9fe:a9fe]", "nothing"},
	// Written with characters that IDNA maps to digits and dots, as net/http does before it dials:
	// the address dialled is the one checked at create (they were stored, to be refused at delivery).
	{"169。254。169。254", "nothing"},
	{"１６９．２５４．１６９．２５４", "nothing"},
	{"169.254.169.２５４", "nothing"},
	{"①②⑦.0.0.1", "loopback"},
	{"127。0。0。1", "loopback"},
	{"１０.0.0.1", "private"},
	// Azure's wireserver (a public address) and the metadata endpoints' names, in their forms.
	{"168.63.129.16", "nothing"},
	{"168.63.129.16.", "nothing"},
	{"[::ffff:168.63.129.16]", "nothing"},
	{"[64:ff9b::a83f:8110]", "nothing"},
	{"2822734096", "nothing"},
	{"0xa83f8110", "nothing"},
	{"metadata.google.internal", "nothing"}, // was allowed at create, refused at the dial only
	{"metadata.google.internal.", "nothing"},
	{"Metadata.Google.Internal", "nothing"},
	{"metadata", "nothing"},
	{"instance-data", "nothing"},
	{"1684301000", "nothing"},         // 100.100.100.200
	{"[64:ff9b::c000:c0]", "nothing"}, // 192.0.0.192
	// Allowed at create: global addresses, and names (checked on the address dialled, at every
	// delivery).
	{"example.com", "everything"},
	{"8.8.8.8", "everything"},
	{"[2606:4700::1]", "everything"},
	{"[::ffff:8.8.8.8]", "everything"},
	{"localhost", "everything"},
	{"metadata.google.internal.example.com", "everything"},
	{"10.0.0.1.nip.io", "everything"},
	{"bücher.example", "everything"},
}

// A task whose url's host is an address the delivery policy forbids is refused at create, with a
// 400 naming the url, and nothing is written; the same policy (WEBHOOK_ALLOW_LOOPBACK,
// WEBHOOK_ALLOW_PRIVATE) allows what the deliverer would connect to. Through the HTTP API, under
// each of the four settings.
func TestTaskURLToAForbiddenAddressIsRefusedAtCreate(t *testing.T) {
	t.Parallel()
	store := wire.NewStores(testdb.Core(t, mysql.Config{}, 4))
	rows := func() int {
		var n int
		require.NoError(t, store.DB.Pool().QueryRow("SELECT COUNT(*) FROM events").Scan(&n))
		return n
	}
	for _, p := range []webhook.Policy{{}, {AllowLoopback: true}, {AllowPrivate: true}, {AllowLoopback: true, AllowPrivate: true}} {
		q := &recordingQueue{}
		srv := openapitest.NewServer(t, &api.Server{Stores: store.API(), Queue: q, Webhook: p})
		b := &testBundle{store: store, queue: q, srv: srv}
		for _, tc := range taskURLHosts {
			allowed := tc.allowedBy == "everything" || tc.allowedBy == "loopback" && p.AllowLoopback ||
				tc.allowedBy == "private" && p.AllowPrivate
			url := "http://" + tc.host + "/hook"
			before := rows()
			status, body, _ := b.do(t, "POST", "/events/async", `{"url": "`+url+`", "payload": {"n": 1}, "referenceId": "r"}`)
			if allowed {
				require.Equal(t, http.StatusAccepted, status, "%+v: %s: %v", p, url, body)
				require.Equal(t, before+1, rows())
				continue
			}
			require.Equal(t, http.StatusBadRequest, status, "%+v: %s: %v", p, url, body)
			msg, _ := body["error"].(string)
			require.True(t, strings.HasPrefix(msg, "url: "), "%+v: %s: the error %q does not name the url", p, url, msg)
			require.Contains(t, msg, "which deliveries must not connect to", "%+v: %s", p, url)
			require.Equal(t, before, rows(), "%+v: %s: a refused create wrote an event", p, url)
			if tc.allowedBy == "nothing" {
				require.NotContains(t, msg, "WEBHOOK_ALLOW", "%+v: %s: no setting allows it", p, url)
			}
		}
		srv.Close()
	}
	// The refusals say what the host is.
	b := &testBundle{store: store, queue: &recordingQueue{}, srv: openapitest.NewServer(t, &api.Server{Stores: store.API(),
		Webhook: webhook.Policy{AllowLoopback: true, AllowPrivate: true}})}
	t.Cleanup(b.srv.Close)
	for host, says := range map[string]string{
		"169.254.169.254":          "url: 169.254.169.254 is the cloud metadata endpoint",
		"[fd00:ec2::254]":          "url: fd00:ec2::254 is AWS's metadata endpoint over IPv6",
		"0x7f.1":                   "url: 0x7f.1 is 127.0.0.1, a non-standard numeric form of an IPv4 address, which deliveries must not connect to; write it in dotted decimal (127.0.0.1)",
		"[::ffff:169.254.169.254]": "url: ::ffff:169.254.169.254 is the IPv4-mapped form of the cloud metadata endpoint",
		"100.64.0.1":               "url: 100.64.0.1 is a carrier-grade NAT address",
		"[fe80::1]":                "url: fe80::1 is a link-local address",
		"0xa9fe.0xa9fe":            "url: 0xa9fe.0xa9fe is a numeric host in a non-standard form",
		"169。254。169。254":          "url: 169。254。169。254 is 169.254.169.254, the cloud metadata endpoint",
		"168.63.129.16":            "url: 168.63.129.16 is Azure's wireserver",
		"metadata.google.internal": "url: metadata.google.internal is Google Cloud's metadata server, which deliveries must not connect to",
	} {
		status, body, _ := b.do(t, "POST", "/events/async", `{"url": "https://`+host+`/"}`)
		require.Equal(t, http.StatusBadRequest, status)
		require.Contains(t, body["error"], says)
	}
	n, err := store.Events.Count(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, rows(), n)
}

// POST /events with a task's fields is refused with a pointer to POST /events/async, where tasks
// are created; nothing is written.
func TestPlainCreateWithTaskFieldsPointsToAsync(t *testing.T) {
	t.Parallel()
	b := taskServer(t)
	for _, body := range []string{
		`{"url": "https://example.com/hook"}`,
		`{"url": "https://example.com/hook", "payload": {"n": 1}, "referenceId": "r", "maxRetries": 2}`,
		`{"payload": {"n": 1}}`,
		`{"referenceId": "r"}`,
		`{"maxRetries": 2}`,
	} {
		status, out, _ := b.do(t, "POST", "/events", body)
		require.Equal(t, http.StatusBadRequest, status, body)
		msg, _ := out["error"].(string)
		require.Contains(t, msg, "POST /events/async", body)
		require.Contains(t, msg, "unknown field", body)
	}
	status, out, _ := b.do(t, "POST", "/events", `{"value": "mine"}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.NotContains(t, out["error"], "/events/async", "not a task's field")
	n, err := b.store.Events.Count(context.Background())
	require.NoError(t, err)
	require.Zero(t, n)
	require.Empty(t, b.queue.ids)
}
