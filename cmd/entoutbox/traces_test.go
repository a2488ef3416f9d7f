package main

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
)

// One trace from a request to its handler through the entoutbox relay
// command, over OTLP/HTTP and OTLP/gRPC: the test emits an event in a
// request's span, the built command relays it (to PostgreSQL as the
// broker) exporting its spans to an OTLP receiver in the test, and an
// in-process consumer handles it. The relay's send span arrives at the
// receiver in the request's trace, the request's child, under the
// service name; the handler's span is the send span's child. The relay's
// spans are batched for ten minutes (OTEL_BSP_SCHEDULE_DELAY), so they
// arrive only because the relay sends them when it stops.
func TestRelayCommandExportsTraces(t *testing.T) {
	bin := buildCommand(t)
	// Emit and the consumer carry the trace with the global propagator.
	otel.SetTextMapPropagator(propagation.TraceContext{})
	for _, c := range []struct {
		protocol, service, wantService string
		receive                        func(*testing.T, *spanReceiver) string
	}{
		{"http/protobuf", "", "entoutbox-relay", receiveHTTP},
		{"grpc", "orders-relay", "orders-relay", receiveGRPC},
	} {
		t.Run(c.protocol, func(t *testing.T) {
			got := &spanReceiver{}
			endpoint := c.receive(t, got)
			db := outboxDB(t)
			client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
			inProcess := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(inProcess))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

			ctx, request := tp.Tracer("test").Start(context.Background(), "request")
			require.NoError(t, client.WithTx(ctx, func(tx *testent.Tx) error {
				return tx.Outbox.EmitOrderPaid(ctx, "order-1", testent.OrderPaid{OrderID: 1, AmountCents: 100})
			}))
			request.End()

			env := map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
				"OTEL_EXPORTER_OTLP_PROTOCOL": c.protocol,
				"OTEL_BSP_SCHEDULE_DELAY":     "600000",
			}
			if c.service != "" {
				env["OTEL_SERVICE_NAME"] = c.service
			}
			relay := startCommand(t, bin, env, "relay", "--database-url", db.URL, "--broker", db.URL, "--poll-interval", "50ms")

			handled := consume(t, db.URL, client, tp)
			select {
			case <-handled:
			case <-time.After(patience):
				t.Fatalf("the event was not handled; the relay's log:\n%s", relay.logs)
			}
			require.NoError(t, relay.stop(), "the relay's log:\n%s", relay.logs)
			require.Contains(t, relay.logs.String(), "Exporting traces")

			send, ok := got.find("send orders")
			require.True(t, ok, "no send span received; received %v; the relay's log:\n%s", got.all(), relay.logs)
			require.Equal(t, request.SpanContext().TraceID().String(), send.traceID, "the request's trace")
			require.Equal(t, request.SpanContext().SpanID().String(), send.parentID, "the request's child")
			require.Equal(t, c.wantService, send.service)

			// The handler signals before its span ends.
			var process sdktrace.ReadOnlySpan
			require.Eventually(t, func() bool {
				for _, s := range inProcess.GetSpans().Snapshots() {
					if s.Name() == "process orders" {
						process = s
					}
				}
				return process != nil
			}, patience, 10*time.Millisecond, "no process span in the consumer")
			require.Equal(t, send.traceID, process.SpanContext().TraceID().String())
			require.Equal(t, send.spanID, process.Parent().SpanID().String(), "the handler's span is the send span's child")
		})
	}
}

// consume handles the events on "orders" as consumer billing, reading
// them from the PostgreSQL broker at databaseURL, and tells when one was
// handled.
func consume(t *testing.T, databaseURL string, client *testent.Client, tp *sdktrace.TracerProvider) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	b, err := broker.Open(ctx, databaseURL, broker.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	sub, err := b.Subscriber("billing")
	require.NoError(t, err)
	msgs, err := sub.Subscribe(ctx, "orders")
	require.NoError(t, err)
	h := testent.NewOutboxHandlers(client, consumer.WithTracerProvider(tp))
	handled := make(chan struct{}, 1)
	h.OnOrderPaid("billing", func(context.Context, *testent.Tx, *testent.OrderPaid, events.Meta) error {
		select {
		case handled <- struct{}{}:
		default:
		}
		return nil
	})
	go func() {
		for msg := range msgs {
			if err := h.Handle(msg.Context(), "billing", msg); err != nil {
				msg.Nack()
				continue
			}
			msg.Ack()
		}
	}()
	return handled
}

// receivedSpan is a span as an OTLP receiver got it.
type receivedSpan struct {
	service, name, traceID, spanID, parentID string
}

// spanReceiver keeps the spans of the OTLP export requests it is given.
type spanReceiver struct {
	mu    sync.Mutex
	spans []receivedSpan
}

func (r *spanReceiver) record(req *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		var service string
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, receivedSpan{service: service, name: s.GetName(),
					traceID: hex.EncodeToString(s.GetTraceId()), spanID: hex.EncodeToString(s.GetSpanId()),
					parentID: hex.EncodeToString(s.GetParentSpanId())})
			}
		}
	}
}

func (r *spanReceiver) find(name string) (receivedSpan, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.spans {
		if s.name == name {
			return s, true
		}
	}
	return receivedSpan{}, false
}

func (r *spanReceiver) all() []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receivedSpan(nil), r.spans...)
}

// receiveHTTP serves OTLP/HTTP (protobuf) into r and returns its endpoint.
func receiveHTTP(t *testing.T, r *spanReceiver) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
			http.NotFound(w, req)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			gz, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = gz
		}
		data, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var export coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(data, &export); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.record(&export)
		resp, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// traceService is an OTLP/gRPC trace receiver.
type traceService struct {
	coltracepb.UnimplementedTraceServiceServer
	r *spanReceiver
}

func (s traceService) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.r.record(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// receiveGRPC serves OTLP/gRPC into r and returns its endpoint.
func receiveGRPC(t *testing.T, r *spanReceiver) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, traceService{r: r})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return "http://" + ln.Addr().String()
}

// buildCommand builds this command once per test binary.
var buildCommand = func() func(t *testing.T) string {
	build := sync.OnceValues(func() (string, error) {
		dir, err := os.MkdirTemp("", "entoutbox-cmd")
		if err != nil {
			return "", err
		}
		bin := filepath.Join(dir, "entoutbox")
		if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
			return "", &buildError{out: string(out), err: err}
		}
		return bin, nil
	})
	return func(t *testing.T) string {
		t.Helper()
		bin, err := build()
		require.NoError(t, err, "building the command")
		return bin
	}
}()

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + ":\n" + e.out }

// startCommand runs the built command with args, its environment this
// process's without the OTEL_ and ENTOUTBOX_ variables, plus env; stop
// sends SIGTERM and waits for it to exit.
func startCommand(t *testing.T, bin string, env map[string]string, args ...string) *runningRelay {
	t.Helper()
	logs := &syncBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logs, logs
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") && !strings.HasPrefix(kv, "ENTOUTBOX_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var once sync.Once
	var err error
	stop := func() error {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err = <-done:
			case <-time.After(patience):
				_ = cmd.Process.Kill()
				err = <-done
				t.Errorf("the command did not stop within %s", patience)
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return &runningRelay{logs: logs, stop: stop}
}
