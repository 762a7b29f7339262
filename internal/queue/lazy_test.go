package queue

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"
)

// A LazyClient builds nothing until its first call, builds once however many calls race for it,
// and sends through the client it built. An SQSSender takes it as its client.
func TestLazyClientBuildsAtTheFirstCallOnce(t *testing.T) {
	t.Parallel()
	var sends atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sends.Add(1)
		var in struct{ MessageBody string }
		_ = json.NewDecoder(r.Body).Decode(&in)
		sum := md5.Sum([]byte(in.MessageBody)) // the SDK checks it
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_, _ = w.Write([]byte(`{"MessageId":"m","MD5OfMessageBody":"` + hex.EncodeToString(sum[:]) + `"}`))
	}))
	t.Cleanup(srv.Close)
	var builds atomic.Int32
	lazy := OnFirstUse(func() (*sqs.Client, error) {
		builds.Add(1)
		return sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
			Credentials: credentials.NewStaticCredentialsProvider("k", "s", "")}), nil
	})
	s := &SQSSender{Client: lazy, QueueURL: srv.URL + "/000000000000/q"}
	require.Zero(t, builds.Load(), "nothing is built before the first call")

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { require.NoError(t, s.Send(context.Background(), []int64{1})) })
	}
	wg.Wait()
	require.Equal(t, int32(1), builds.Load(), "built once")
	require.Equal(t, int32(8), sends.Load())
}

// A client that cannot be built (an AWS configuration that does not load) is each call's error,
// and is not built again at every call.
func TestLazyClientBuildErrorIsEachCallsError(t *testing.T) {
	t.Parallel()
	var builds atomic.Int32
	bad := errors.New("invalid value AWS_MAX_ATTEMPTS=x")
	lazy := OnFirstUse(func() (*sqs.Client, error) { builds.Add(1); return nil, bad })
	s := &SQSSender{Client: lazy, QueueURL: "http://127.0.0.1:9/000000000000/q"}
	for range 3 {
		require.ErrorIs(t, s.Send(context.Background(), []int64{1}), bad)
	}
	_, err := lazy.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{})
	require.ErrorIs(t, err, bad)
	_, err = lazy.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{})
	require.ErrorIs(t, err, bad)
	require.Equal(t, int32(1), builds.Load())
}
