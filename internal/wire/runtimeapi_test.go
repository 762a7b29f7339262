package wire_test

import (
	"testing"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// A function's configuration carries Lambda's AWS_LAMBDA_RUNTIME_API into the address rule of the
// API (a task's url at create) and of the deliverers: with WEBHOOK_ALLOW_LOOPBACK=true, as make
// invoke runs the functions, the Runtime API's port is refused and another loopback port is not.
func TestTheRuntimeAPIReachesTheAddressRule(t *testing.T) {
	env := map[string]string{"DB_DSN": "u:p@tcp(127.0.0.1:1)/d", "AWS_LAMBDA_RUNTIME_API": "127.0.0.1:9001", "WEBHOOK_ALLOW_LOOPBACK": "true"}
	c, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	p := wire.WebhookPolicy(c)
	if err := p.CheckURL("http://127.0.0.1:9001/2018-06-01/runtime/init/error"); err == nil {
		t.Fatal("a task's url at the Lambda Runtime API was accepted")
	}
	if err := p.CheckURL("http://127.0.0.1:9000/hook"); err != nil {
		t.Fatalf("another loopback port: %v", err)
	}
}
