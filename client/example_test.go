package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/exactlyonce/exactlyonce/client"
)

// The client against `make run` (on AWS: client.NewAWS with the stack's ApiUrl output, which signs
// with the AWS SDK's default credentials and region).
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // bounds the retries too
	defer cancel()
	c, err := client.New("http://127.0.0.1:8080", client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	// A create carries an Idempotency-Key, generated once and sent on each retry: retried after a
	// lost answer, it returns the original event (e.Replayed) and stores nothing new.
	e, err := c.CreateEvent(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(e.ID, *e.Value)

	// A task, with the caller's own key: the same order is one task however often it is sent.
	t, err := c.CreateTask(ctx, client.NewTask{URL: "https://example.com/hook", ReferenceID: "order-42"},
		client.WithIdempotencyKey("order-42-created"))
	if err != nil {
		log.Fatal(err)
	}
	it, err := c.GetEvent(ctx, t.ID)
	if err == nil && it.Task != nil {
		fmt.Println(it.Task.State)
	}

	_, err = c.GetEvent(ctx, 999999)
	var apiErr *client.Error
	switch {
	case errors.Is(err, client.ErrNotFound): // and ErrInvalid (apiErr.Field), ErrKeyReused, ErrUnavailable
	case errors.As(err, &apiErr):
		log.Fatal(apiErr.Status, apiErr.Message)
	}
}
