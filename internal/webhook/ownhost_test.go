package webhook

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/testutil"
)

// The system's own API (OwnHosts, WEBHOOK_API_HOSTS: on AWS the REST API's execute-api domain) is refused
// as a task's host whatever the settings: with the API open (-c publicApi=true), a task whose url
// is the API's POST /events/async and whose payload is a task's body made a new task at every
// delivery, without end. The host is refused by name in any case, with a trailing dot or written
// in full-width letters, at create (CheckURL) and before the dial, and the receiver standing for
// the API accepts no connection; another host of the same service is a receiver like any other.
func TestTheSystemsOwnAPIIsRefusedWhateverTheSettings(t *testing.T) {
	t.Parallel()
	const own = "a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com"
	api, other := newReceiver(t), newReceiver(t)
	dns := testutil.NewDNS(map[string][]string{own: {"127.0.0.1"}, "other.execute-api.eu-west-1.amazonaws.com": {"127.0.0.1"}})
	for _, p := range []Policy{{}, {AllowLoopback: true}, {AllowPrivate: true}, {AllowLoopback: true, AllowPrivate: true}} {
		p.OwnHosts = []string{own}
		for _, h := range []string{own, own + ".", strings.ToUpper(own), "Ａ1b2c3d4e5.execute-api.eu-west-1.amazonaws.com"} {
			err := p.CheckURL("https://" + h + "/prod/events/async")
			if err == nil || !strings.Contains(err.Error(), "this system's own API") || strings.Contains(err.Error(), "WEBHOOK_ALLOW") {
				t.Errorf("%+v: CheckURL of %s: %v, want refused as the system's own API", p, h, err)
			}
		}
		if err := p.CheckURL("https://other.execute-api.eu-west-1.amazonaws.com/prod/hook"); err != nil {
			t.Errorf("%+v: another API's host: %v", p, err)
		}
	}
	c := New(Config{Key: testKey(t), Resolver: dns.Resolver(), AllowLoopback: true, Timeout: 5 * time.Second, OwnHosts: []string{own}})
	for _, h := range []string{own, own + ".", strings.ToUpper(own)} {
		res := c.Deliver(t.Context(), Request{ID: "msg_own", URL: "http://" + h + ":" + strconv.Itoa(api.port) + "/events/async", Payload: []byte(`{"url":"x"}`)})
		if res.Outcome != Refused || !strings.Contains(res.Message, "this system's own API") {
			t.Errorf("%s: %v %d %q, want refused as the system's own API", h, res.Outcome, res.Status, res.Message)
		}
	}
	if n := api.connections(); n != 0 {
		t.Fatalf("the API's stand-in accepted %d connections", n)
	}
	res := c.Deliver(t.Context(), Request{ID: "msg_other", URL: "http://other.execute-api.eu-west-1.amazonaws.com:" + strconv.Itoa(other.port) + "/", Payload: []byte(`{}`)})
	if res.Outcome != Delivered {
		t.Fatalf("another host: %v %q, want delivered", res.Outcome, res.Message)
	}
}
