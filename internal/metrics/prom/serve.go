package prom

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/httpserver"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
)

// Serve returns the Recorder of part for a long-running process (cmd/agent), and, when addr
// (METRICS_ADDR) is set and not "off", serves its registry on http://addr/metrics until ctx ends.
// Unset or off: the Recorder records nothing (nil).
func Serve(ctx context.Context, addr string, part metrics.Part, log *slog.Logger) (*metrics.Recorder, error) {
	if addr == "" || addr == config.MetricsOff {
		return nil, nil
	}
	reg := New()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s (METRICS_ADDR): %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", reg.Handler())
	srv := httpserver.New(mux)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics: endpoint stopped", "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("metrics served", "url", "http://"+ln.Addr().String()+"/metrics")
	return reg.Recorder(part), nil
}
