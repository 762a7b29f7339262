package webhook

import (
	"strconv"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/testutil"
)

// The Lambda Runtime API (AWS_LAMBDA_RUNTIME_API, 127.0.0.1:9001 in a Lambda environment and under
// the emulator of make invoke) is the function's own control plane: a POST to it reports an
// invocation's result or an initialisation's failure, and its error answers would come back as the
// task's exceptionMessage. It is refused whatever the settings, WEBHOOK_ALLOW_LOOPBACK=true
// included (make invoke's default), in every spelling of its address, at create and at the dial;
// other loopback ports stay allowed by the setting. The receiver standing for it counts the
// connections it accepts: none.
func TestLambdaRuntimeAPIRefusedWhateverTheSettings(t *testing.T) {
	t.Parallel()
	runtime, other := newReceiver(t), newReceiver(t)
	rp, op := strconv.Itoa(runtime.port), strconv.Itoa(other.port)
	dns := testutil.NewDNS(map[string][]string{"runtime.test": {"127.0.0.1"}, "mapped.test": {"::ffff:127.0.0.1"}, "v6.test": {"::1"}})
	cfg := Config{Key: testKey(t), Resolver: dns.Resolver(), AllowLoopback: true, AllowPrivate: true,
		Timeout: 5 * time.Second, LambdaRuntimeAPI: "127.0.0.1:" + rp}
	c := New(cfg)
	hosts := []string{"127.0.0.1", "[::ffff:127.0.0.1]", "127.0.0.2", "[::1]", "runtime.test", "mapped.test", "v6.test", "localhost"}
	for _, h := range hosts {
		u := "http://" + h + ":" + rp + "/2018-06-01/runtime/init/error"
		res := c.Deliver(t.Context(), Request{ID: "msg_rt", URL: u, Payload: []byte(`{}`)})
		if res.Outcome != Refused {
			t.Errorf("%s: %v %d %q, want refused", u, res.Outcome, res.Status, res.Message)
		}
	}
	for _, h := range []string{"127.0.0.1", "[::ffff:127.0.0.1]", "127.0.0.2", "[::1]"} {
		if err := cfg.Policy().CheckURL("http://" + h + ":" + rp + "/"); err == nil {
			t.Errorf("CheckURL of %s:%s: accepted, want refused at create", h, rp)
		}
	}
	if n := runtime.connections(); n != 0 {
		t.Fatalf("the runtime API's port accepted %d connections", n)
	}
	// Another loopback port is a receiver like any other under WEBHOOK_ALLOW_LOOPBACK.
	for _, h := range []string{"127.0.0.1", "runtime.test"} {
		if res := c.Deliver(t.Context(), Request{ID: "msg_ok", URL: "http://" + h + ":" + op + "/", Payload: []byte(`{}`)}); res.Outcome != Delivered {
			t.Errorf("%s:%s: %v %q, want delivered", h, op, res.Outcome, res.Message)
		}
	}
	if err := cfg.Policy().CheckURL("http://127.0.0.1:" + op + "/"); err != nil {
		t.Errorf("CheckURL of another loopback port: %v", err)
	}
}
