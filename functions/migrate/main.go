// Command migrate is invoked once per deployment (a CDK Trigger): it applies the embedded schema and
// fails, failing the deployment, if any schema rule is broken.
package main

import (
	"context"
	"encoding/json"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/exactlyonce/exactlyonce/internal/migration"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/wire/boot"
)

func main() {
	cfg := boot.Must(boot.Environment())
	cfg.DB.Migrate = new(false) // the handler migrates, so that a failure is the invocation's error
	open := func(ctx context.Context) (*mysql.DB, error) { return boot.OpenDB(ctx, cfg) }
	h := &migration.Handler{Open: open, Logger: boot.Logger(cfg)}
	h.Users = boot.Must(mysql.ParseFunctionUsers(os.Getenv("DB_FUNCTION_USERS"))) // each function's own database user
	lambda.Start(func(ctx context.Context, ev json.RawMessage) (migration.Result, error) {
		res, err := h.Handle(ctx, ev)
		return res, boot.DatabaseError(cfg.DB, err) // a missing database: which, and what to do
	})
}
