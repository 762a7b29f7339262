// Package httpserver makes the HTTP servers the project starts (the local API and console, the
// console of cmd/ui, the metrics endpoints, the example receiver, the test and benchmark
// harnesses), with one set of timeouts.
package httpserver

import (
	"net/http"
	"time"
)

const (
	// ReadHeaderTimeout bounds reading a request's headers: a client that opens a connection and
	// sends them slowly, or never, holds it no longer.
	ReadHeaderTimeout = 10 * time.Second
	// IdleTimeout closes a keep-alive connection that has carried no request for this long (without
	// it, net/http keeps an idle connection open for as long as the client does).
	IdleTimeout = 60 * time.Second
)

// New returns a server for h with ReadHeaderTimeout and IdleTimeout. It sets no ReadTimeout and no
// WriteTimeout: they count from a request's start, so they would bound how long a handler may take
// (a long poll, a slow query) rather than how long a client may stall; the API bounds the reading of
// a body itself (api.Server.BodyReadTimeout). "OPTIONS *" goes to h like any request
// (DisableGeneralOptionsHandler), where net/http would answer it itself, a bare 200 without h's
// headers (the API's JSON and nosniff).
func New(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: ReadHeaderTimeout, IdleTimeout: IdleTimeout,
		DisableGeneralOptionsHandler: true}
}
