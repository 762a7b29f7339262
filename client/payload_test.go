package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/client"
)

// CreateTask sends the task's payload byte for byte, as the API stores it and delivers it (the
// body a receiver gets and whose signature it checks). The client marshalled the task with
// json.Marshal, which compacts a json.RawMessage and escapes <, > and & in it: {"n": 1, "h": "<b>"}
// went out, and reached the receiver, as {"n":1,"h":"\u003cb\u003e"}, so a receiver comparing the
// body with what the producer sent (a digest of it, say) saw another one. A payload that is not
// JSON is refused before anything is sent.
func TestCreateTaskSendsThePayloadAsGiven(t *testing.T) {
	t.Parallel()
	bodies := make(chan []byte, 8)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies <- b
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"id":7}`))
	}))
	t.Cleanup(api.Close)
	c, err := client.New(api.URL, client.Options{})
	require.NoError(t, err)
	for _, payload := range []string{
		`{"n": 1, "h": "<b>&amp;</b>", "list": [ 1.0, 1e2 ]}`,
		"{\n  \"indented\": true\n}",
		`"a string \u00e9 with <markup>"`,
		`12345678901234567890`,
	} {
		three := 3
		created, err := c.CreateTask(context.Background(), client.NewTask{URL: "https://example.com/hook", Payload: json.RawMessage(payload),
			ReferenceID: "order-<1>", MaxRetries: &three})
		require.NoError(t, err)
		require.EqualValues(t, 7, created.ID)
		body := <-bodies
		var sent struct {
			URL         string          `json:"url"`
			Payload     json.RawMessage `json:"payload"`
			ReferenceID string          `json:"referenceId"`
			MaxRetries  int             `json:"maxRetries"`
		}
		require.NoError(t, json.Unmarshal(body, &sent), "%s", body)
		require.Equal(t, payload, string(sent.Payload), "the payload as the request carried it: %s", body)
		require.Equal(t, "https://example.com/hook", sent.URL)
		require.Equal(t, "order-<1>", sent.ReferenceID)
		require.Equal(t, 3, sent.MaxRetries)
	}
	// No payload: none sent.
	_, err = c.CreateTask(context.Background(), client.NewTask{URL: "https://example.com/hook"})
	require.NoError(t, err)
	require.JSONEq(t, `{"url":"https://example.com/hook"}`, string(<-bodies))
	// Not JSON: refused, nothing sent.
	_, err = c.CreateTask(context.Background(), client.NewTask{URL: "https://example.com/hook", Payload: json.RawMessage(`{"n":`)})
	require.Error(t, err)
	var apiErr *client.Error
	require.True(t, errors.As(err, &apiErr) && apiErr.Local && apiErr.Field == "payload", "%v", err)
	require.Empty(t, bodies)
}
