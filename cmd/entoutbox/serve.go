package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// opsServer serves what operators and orchestrators ask a running relay:
// /metrics (Prometheus), /healthz (the process runs the relay loop) and
// /readyz (the relay can deliver now), and with --pprof Go's profiles
// under /debug/pprof/ (off by default: a profile shows the code's inner
// workings to whoever reaches the address).
type opsServer struct {
	srv   *http.Server
	addr  string // the address it listens on, the port chosen when it was :0
	alive atomic.Bool
	done  chan struct{}
}

// readyTimeout bounds one /readyz check.
const readyTimeout = 5 * time.Second

// startOpsServer listens on addr and serves reg's metrics and the health
// endpoints, ready telling whether the relay can deliver. It fails at
// once when addr cannot be listened on.
func startOpsServer(addr string, reg *prometheus.Registry, ready func(context.Context) error, logger *slog.Logger,
	redact redactor, profiles bool) (*opsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %q: %w", addr, err)
	}
	o := &opsServer{addr: ln.Addr().String(), done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelError)}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !o.alive.Load() {
			http.Error(w, "not running the relay loop", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), readyTimeout)
		defer cancel()
		if err := ready(ctx); err != nil {
			http.Error(w, redact.String(err.Error()), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	paths := "/metrics /healthz /readyz"
	if profiles {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
		paths += " /debug/pprof/"
	}
	o.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	go func() {
		defer close(o.done)
		if err := o.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("Serving metrics and health checks stopped", "error", err)
		}
	}()
	logger.Info("Serving metrics and health checks", "addr", o.addr, "paths", paths)
	return o, nil
}

// setAlive tells /healthz whether the relay loop runs.
func (o *opsServer) setAlive(alive bool) { o.alive.Store(alive) }

// close stops serving, letting requests under way finish for a moment.
func (o *opsServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = o.srv.Shutdown(ctx)
	<-o.done
}
