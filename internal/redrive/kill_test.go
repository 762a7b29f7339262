package redrive

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/exactlyonce/exactlyonce/internal/child"
	"github.com/exactlyonce/exactlyonce/internal/localsqs"
	"github.com/stretchr/testify/require"
)

// The child role of TestARedriveKilledMidMoveLosesNothing.
const killedRedriveRole = "redrive-killed"

func TestMain(m *testing.M) {
	if role := os.Getenv(child.RoleEnv); role != "" {
		os.Exit(runChild(role))
	}
	os.Exit(m.Run())
}

func runChild(role string) int {
	if role != killedRedriveRole {
		fmt.Fprintln(os.Stderr, "unknown child role", role)
		return 2
	}
	n, err := strconv.Atoi(os.Getenv("REDRIVE_TEST_STOP_AT"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	c := &stopping{SQS: localsqs.NewClient(os.Getenv("REDRIVE_TEST_ENDPOINT")), step: os.Getenv("REDRIVE_TEST_STEP"), n: n,
		bodies: map[string]string{}}
	q := Queues{SourceURL: os.Getenv("REDRIVE_TEST_SOURCE"), DLQURL: os.Getenv("REDRIVE_TEST_DLQ")}
	_, err = MoveOneByOne(context.Background(), c, q, os.Stderr)
	fmt.Fprintln(os.Stderr, "the redrive ended, not stopped:", err)
	return 1
}

// stopping is the SQS of a redrive process that stops for good (to be killed) when it is about
// to make the n-th call of its step ("send" or "delete"), having said so on stdout ("stopped
// <body>"). It says the receipt handle of every message it receives ("received <handle>").
type stopping struct {
	SQS
	step     string
	n, calls int
	bodies   map[string]string // by receipt handle
}

func (s *stopping) stopAt(step, body string) {
	if step != s.step {
		return
	}
	if s.calls++; s.calls == s.n {
		fmt.Println("stopped", strconv.Quote(body))
		time.Sleep(time.Hour) // until the parent's SIGKILL
	}
}

func (s *stopping) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := s.SQS.ReceiveMessage(ctx, in, opts...)
	if err == nil {
		for _, m := range out.Messages {
			fmt.Println("received", aws.ToString(m.ReceiptHandle))
			s.bodies[aws.ToString(m.ReceiptHandle)] = aws.ToString(m.Body)
		}
	}
	return out, err
}

func (s *stopping) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	s.stopAt("send", aws.ToString(in.MessageBody))
	return s.SQS.SendMessage(ctx, in, opts...)
}

func (s *stopping) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	s.stopAt("delete", s.bodies[aws.ToString(in.ReceiptHandle)])
	return s.SQS.DeleteMessage(ctx, in, opts...)
}

// Invariant: a redrive process SIGKILLed in the middle of a move, just before the third message's
// send or just before its delete (after its send), loses no message: once the messages it held
// are visible again (as they are after its receive's visibility timeout) a second redrive moves
// the rest, and the source queue holds every body of the DLQ, the one killed between its send and
// its delete twice (at least once, as the queue delivers anyway), the DLQ nothing. The kill lands
// at the step itself, not by chance: the child stops there, says so, and waits for it. With the
// delete made before the send (moveOne's order swapped), the kill before the send loses that
// message and the test fails.
func TestARedriveKilledMidMoveLosesNothing(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"send", "delete"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			client, q := setup(t)
			p := child.Start(t, killedRedriveRole, "REDRIVE_TEST_ENDPOINT="+localsqs.Endpoint(t),
				"REDRIVE_TEST_SOURCE="+q.SourceURL, "REDRIVE_TEST_DLQ="+q.DLQURL,
				"REDRIVE_TEST_STEP="+step, "REDRIVE_TEST_STOP_AT=3")
			line, err := p.WaitLine("stopped ", time.Minute)
			require.NoError(t, err)
			p.Kill()

			// What the killed process held comes back, as after its visibility timeout (60 s):
			// made visible by its receipt handles (those of messages it deleted answer an error).
			var held int
			for _, l := range p.Output() {
				if h, ok := strings.CutPrefix(l, "received "); ok {
					held++
					_, _ = client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
						QueueUrl: aws.String(q.DLQURL), ReceiptHandle: aws.String(h), VisibilityTimeout: 0})
				}
			}
			require.GreaterOrEqual(t, held, 3, "the killed redrive had received the messages it moved and the one it stopped at")
			inSource := depth(t, client, q.SourceURL)
			want := map[string]int{"send": 2, "delete": 3}[step]
			require.Equal(t, want, inSource, "the killed redrive sent the messages before the one it stopped at, and that one if its send was made")

			var out bytes.Buffer
			moved, err := MoveOneByOne(ctx, client, q, &out)
			require.NoError(t, err, out.String())
			require.Zero(t, depth(t, client, q.DLQURL), "the DLQ is empty")

			got := bodies(drain(t, client, q.SourceURL))
			wantBodies := append([]string(nil), dlqBodies...)
			if step == "delete" {
				body, err := strconv.Unquote(strings.TrimPrefix(line, "stopped "))
				require.NoError(t, err)
				wantBodies = append(wantBodies, body) // sent, then killed before its delete: moved again
			}
			require.Equal(t, sorted(wantBodies), got, "every message of the DLQ is in the source queue, none lost")
			require.Equal(t, len(dlqBodies)-2, moved, "the second redrive moves what the DLQ still holds: the two deleted are gone from it, the one stopped at is still in it")
		})
	}
}
