package wire

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/config"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
)

// ServeMetrics returns the Recorder of part for a long-running process, and, when addr
// (METRICS_ADDR) is set and not "off", serves its Prometheus registry on http://addr/metrics until
// ctx ends. Unset or off: the Recorder records nothing (nil).
func ServeMetrics(ctx context.Context, addr string, part metrics.Part, log *slog.Logger) (*metrics.Recorder, error) {
	if addr == "" || addr == config.MetricsOff {
		return nil, nil
	}
	prom := metrics.NewPrometheus()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s (METRICS_ADDR): %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", prom.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
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
	return prom.Recorder(part), nil
}
