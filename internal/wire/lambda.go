package wire

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/exactlyonce/exactlyonce/internal/wire/boot"
)

// Invocation wraps a Lambda handler of part: the invocation's context carries rec (what the code
// under it records goes there: the store's retries and transaction durations, the engine's claims),
// the process's log lines carry the invocation's request id (Logger, boot.RequestID), and when the handler returns
// rec's EMF line, one per invocation, is written to out (the Lambda's stdout: its log group, where
// CloudWatch extracts the metrics), under FunctionName = AWS_LAMBDA_FUNCTION_NAME (the part's name
// when unset). Lambda runs one invocation at a time per environment, so what rec holds at the end is
// this invocation's; a line is never written per event.
func Invocation[In, Out any](rec *metrics.Recorder, out io.Writer, log *slog.Logger,
	h func(context.Context, In) (Out, error)) func(context.Context, In) (Out, error) {
	function := cmp.Or(os.Getenv("AWS_LAMBDA_FUNCTION_NAME"), string(rec.Part()))
	return func(ctx context.Context, in In) (Out, error) {
		if lc, ok := lambdacontext.FromContext(ctx); ok {
			boot.RequestID.Store(&lc.AwsRequestID)
			defer boot.RequestID.Store(nil)
		}
		o, err := h(metrics.With(ctx, rec), in)
		if ferr := rec.Flush(out, function); ferr != nil {
			log.Error("metrics not published", "err", ferr)
		}
		return o, err
	}
}
