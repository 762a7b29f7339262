package runtimeapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/runtimeapi"
	"github.com/stretchr/testify/require"
)

// A runtime written against the documentation, by hand: poll, read the headers, answer.
func TestTheDocumentedProtocol(t *testing.T) {
	t.Parallel()
	srv, err := runtimeapi.Start("arn:aws:lambda:us-east-1:000000000000:function:f", 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	base := "http://" + srv.Addr() + "/2018-06-01/runtime/"

	type answer struct {
		res runtimeapi.Result
		err error
	}
	invoke := func(payload string) chan answer {
		ch := make(chan answer, 1)
		go func() {
			res, err := srv.Invoke(context.Background(), []byte(payload))
			ch <- answer{res, err}
		}()
		return ch
	}
	next := func() (string, http.Header, string) {
		resp, err := http.Get(base + "invocation/next")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.Header.Get("Lambda-Runtime-Aws-Request-Id"), resp.Header, string(b)
	}
	post := func(path, body string) int {
		resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}

	// A response.
	ch := invoke(`{"n":1}`)
	id, hdr, body := next()
	require.Equal(t, `{"n":1}`, body)
	require.NotEmpty(t, id)
	require.Equal(t, "arn:aws:lambda:us-east-1:000000000000:function:f", hdr.Get("Lambda-Runtime-Invoked-Function-Arn"))
	ms, err := strconv.ParseInt(hdr.Get("Lambda-Runtime-Deadline-Ms"), 10, 64)
	require.NoError(t, err)
	require.InDelta(t, time.Now().Add(5*time.Second).UnixMilli(), ms, 1000)
	require.Equal(t, http.StatusAccepted, post("invocation/"+id+"/response", `{"ok":true}`))
	a := <-ch
	require.NoError(t, a.err)
	require.Equal(t, id, a.res.RequestID)
	require.JSONEq(t, `{"ok":true}`, string(a.res.Payload))
	require.Nil(t, a.res.Error)
	require.Equal(t, http.StatusBadRequest, post("invocation/"+id+"/response", `{}`), "answered already")
	require.Equal(t, http.StatusBadRequest, post("invocation/no-such-id/response", `{}`))

	// An error.
	ch = invoke(`{"n":2}`)
	id, _, _ = next()
	require.Equal(t, http.StatusAccepted, post("invocation/"+id+"/error", `{"errorType":"Boom","errorMessage":"it broke"}`))
	a = <-ch
	require.NoError(t, a.err)
	require.Equal(t, &runtimeapi.FunctionError{Type: "Boom", Message: "it broke"}, a.res.Error)

	// An init error.
	require.Equal(t, http.StatusAccepted, post("init/error", `{"errorType":"Runtime.Init","errorMessage":"no config"}`))
	select {
	case <-srv.InitError():
	case <-time.After(5 * time.Second):
		t.Fatal("init error not reported")
	}
	require.Equal(t, "Runtime.Init", srv.InitErr().Type)

	// Anything else is not the Runtime API.
	resp, err := http.Get(base + "invocation/x/response")
	require.NoError(t, err)
	var e map[string]string
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.NotEmpty(t, e["errorType"])

	// Nobody polls: Invoke gives up when its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = srv.Invoke(ctx, []byte(`{}`))
	require.ErrorIs(t, err, runtimeapi.ErrNoRuntime)
}
