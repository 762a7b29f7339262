// Command api is the API Lambda: API Gateway REST API proxy events, served by internal/api.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"
	"github.com/exactlyonce/exactlyonce/internal/api"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/queue"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

func main() {
	cfg := wire.Must(config.Load(os.Getenv))
	log := wire.Logger(cfg)
	// Inline: an async request is stored and its message sent in the request's own goroutine, under
	// its context, and answered after both, because Lambda freezes the environment once the answer is
	// returned: nothing of a request may run after it (api.AsyncGroup.Inline).
	server := &api.Server{Store: wire.Must(wire.OpenStore(context.Background(), cfg)), Logger: log,
		AsyncGroup: api.AsyncGroup{Inline: true}}
	if cfg.QueueURL != "" {
		server.Queue = &queue.SQSSender{Client: wire.Must(wire.SQS(log)), QueueURL: cfg.QueueURL}
	}
	lambda.Start(httpadapter.New(server).ProxyWithContext)
}
