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
)

func main() {
	ctx := context.Background()
	cfg := config.Must(config.Load(os.Getenv))
	log := cfg.Logger()
	// AsyncGroup stays zero: an async request is answered only after its message is sent, because
	// Lambda freezes the environment once the answer is returned (api.AsyncGroup.Linger).
	server := &api.Server{Store: config.Must(cfg.OpenStore(ctx)), Logger: log}
	if cfg.QueueURL != "" {
		server.Queue = &queue.SQSSender{Client: config.Must(config.SQS(log)), QueueURL: cfg.QueueURL}
	}
	lambda.Start(httpadapter.New(server).ProxyWithContext)
}
