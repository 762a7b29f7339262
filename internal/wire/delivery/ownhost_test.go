package delivery_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/webhook"
	"github.com/exactlyonce/exactlyonce/internal/wire"
	"github.com/exactlyonce/exactlyonce/internal/wire/delivery"
)

// WEBHOOK_API_HOSTS, which the stack sets to its REST API's domain, reaches the address rule of the
// API (a task's url at create) and of the deliverers delivery.Tasks builds (every delivery): a task to
// the system's own API is refused by both, and the receiver standing for it (at localhost, which
// WEBHOOK_ALLOW_LOOPBACK lets through otherwise) gets no request; another host is delivered to.
func TestTheAPIsOwnHostsReachTheAddressRule(t *testing.T) {
	var hits atomic.Int32
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(recv.Close)
	port := recv.URL[strings.LastIndexByte(recv.URL, ':'):]
	env := map[string]string{"DB_DSN": "u:p@tcp(127.0.0.1:1)/d", "WEBHOOK_ALLOW_LOOPBACK": "true", "WEBHOOK_API_HOSTS": "localhost",
		"WEBHOOK_SECRET": config.LocalWebhookSecret}
	c, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.WebhookPolicy(c).CheckURL("http://localhost" + port + "/events/async"); err == nil {
		t.Fatal("a task's url at the API's own host was accepted at create")
	}
	tasks, err := delivery.Tasks(t.Context(), c, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	res := tasks.Deliverer.Deliver(t.Context(), webhook.Request{ID: "msg_own", URL: "http://localhost" + port + "/events/async", Payload: []byte(`{}`)})
	if res.Outcome != webhook.Refused || !strings.Contains(res.Message, "this system's own API") {
		t.Fatalf("a delivery to the API's own host: %v %q, want refused", res.Outcome, res.Message)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the API's stand-in got %d requests", n)
	}
	res = tasks.Deliverer.Deliver(t.Context(), webhook.Request{ID: "msg_other", URL: recv.URL + "/hook", Payload: []byte(`{}`)})
	if res.Outcome != webhook.Delivered {
		t.Fatalf("another host (127.0.0.1): %v %q, want delivered", res.Outcome, res.Message)
	}
}
