// Command migrate is invoked once per deployment (a CDK Trigger): it applies the embedded schema and
// fails, failing the deployment, if any schema rule is broken.
package main

import (
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/migration"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
)

func main() {
	cfg := config.Must(config.Load(os.Getenv))
	cfg.Migrate = false // the handler migrates, so that a failure is the invocation's error
	h := &migration.Handler{Open: cfg.OpenStore, Logger: cfg.Logger()}
	h.Users = config.Must(mysql.ParseFunctionUsers(os.Getenv("DB_FUNCTION_USERS"))) // each function's own database user
	lambda.Start(h.Handle)
}
