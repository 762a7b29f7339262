// Command sleeper is a bootstrap for the emulator's own tests: it answers with what Lambda gave it
// (its process id, the request id, the deadline, the function ARN), and does what the event asks:
// {"sleep": seconds} ignores its deadline for that long, {"fail": true} returns an error,
// {"exit": true} exits mid-invocation. It prints "init pid N" when it starts, and exits there when
// SLEEPER_EXIT_AT_INIT is set.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
)

type event struct {
	Sleep float64 `json:"sleep"`
	Fail  bool    `json:"fail"`
	Exit  bool    `json:"exit"`
}

func main() {
	fmt.Println("init pid", os.Getpid())
	if os.Getenv("SLEEPER_EXIT_AT_INIT") != "" {
		os.Exit(1) // as a function whose configuration is missing
	}
	lambda.Start(func(ctx context.Context, ev event) (map[string]any, error) {
		lc, _ := lambdacontext.FromContext(ctx)
		deadline, _ := ctx.Deadline()
		slog.New(slog.NewJSONHandler(os.Stdout, nil)).Info("handling", "requestId", lc.AwsRequestID)
		time.Sleep(time.Duration(ev.Sleep * float64(time.Second))) // deliberately deaf to ctx
		if ev.Fail {
			return nil, errors.New("asked to fail")
		}
		if ev.Exit {
			os.Exit(3)
		}
		return map[string]any{"pid": os.Getpid(), "requestId": lc.AwsRequestID,
			"deadlineMs": deadline.UnixMilli(), "arn": lc.InvokedFunctionArn, "memory": os.Getenv("AWS_LAMBDA_FUNCTION_MEMORY_SIZE")}, nil
	})
}
