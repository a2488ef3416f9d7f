package relay_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/tcpproxy"
	"github.com/entoutbox/entoutbox/relay"
)

const (
	failingLog   = "Publishing to the broker fails; retrying until it works again (failures in an outage do not count as attempts)"
	recoveredLog = "Publishing to the broker works again"
)

// captureLogs records what the relay logs, for a test to read while the
// relay runs. (watermill's CaptureLoggerAdapter hands out its map without
// its lock, a data race with the relay logging.)
type captureLogs struct {
	mu     sync.Mutex
	msgs   []watermill.CapturedMessage
	fields watermill.LogFields
	root   *captureLogs
}

func newCaptureLogs() *captureLogs {
	l := &captureLogs{}
	l.root = l
	return l
}

func (l *captureLogs) log(level watermill.LogLevel, msg string, err error, fields watermill.LogFields) {
	l.root.mu.Lock()
	defer l.root.mu.Unlock()
	l.root.msgs = append(l.root.msgs, watermill.CapturedMessage{Level: level, Msg: msg, Err: err,
		Fields: l.fields.Add(fields)})
}

func (l *captureLogs) Error(msg string, err error, fields watermill.LogFields) {
	l.log(watermill.ErrorLogLevel, msg, err, fields)
}
func (l *captureLogs) Info(msg string, fields watermill.LogFields) {
	l.log(watermill.InfoLogLevel, msg, nil, fields)
}
func (l *captureLogs) Debug(msg string, fields watermill.LogFields) {
	l.log(watermill.DebugLogLevel, msg, nil, fields)
}
func (l *captureLogs) Trace(msg string, fields watermill.LogFields) {
	l.log(watermill.TraceLogLevel, msg, nil, fields)
}
func (l *captureLogs) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return &captureLogs{fields: l.fields.Add(fields), root: l.root}
}

func logsOf(l *captureLogs, level watermill.LogLevel, msg string) []watermill.CapturedMessage {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []watermill.CapturedMessage
	for _, m := range l.msgs {
		if m.Level == level && m.Msg == msg {
			out = append(out, m)
		}
	}
	return out
}

// While the broker is away the relay says so once, with the error, and
// once when publishes work again, with how long and how many failed.
func TestRelaySaysBrokerOutageOnce(t *testing.T) {
	skipIfShort(t, "a broker outage")
	t.Parallel()
	const natsAddr = "127.0.0.1:4222"
	b := setupEmit(t)
	direct := openBroker(t, "nats://"+natsAddr, "NATS JetStream at "+natsAddr)
	proxy := tcpproxy.Start(t, natsAddr)
	viaProxy := openBroker(t, "nats://"+proxy.Addr, "NATS JetStream through a local proxy")
	prefix := uniquePrefix()
	got := receiveOn(t, direct, prefix)

	logs := newCaptureLogs()
	stop := runRelay(t, quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: viaProxy.Publisher(), TopicPrefix: prefix,
		Logger: logs}))
	first := emitOrders(t, b.client, 10, 4, 0)
	got.waitFor(t, first, patience)
	require.Empty(t, logsOf(logs, watermill.ErrorLogLevel, failingLog))

	proxy.Cut()
	during := emitOrders(t, b.client, 20, 4, 0)
	require.Eventually(t, func() bool { return len(logsOf(logs, watermill.ErrorLogLevel, failingLog)) > 0 },
		patience, 20*time.Millisecond, "the outage was not logged")
	time.Sleep(2 * time.Second) // retries meanwhile say nothing more
	failing := logsOf(logs, watermill.ErrorLogLevel, failingLog)
	require.Len(t, failing, 1)
	require.Error(t, failing[0].Err, "the outage is logged with the publish error")
	require.Empty(t, logsOf(logs, watermill.InfoLogLevel, recoveredLog))

	proxy.Restore()
	got.waitFor(t, during, patience)
	waitDelivered(t, b, 0)
	require.NoError(t, stop())
	recovered := logsOf(logs, watermill.InfoLogLevel, recoveredLog)
	require.Len(t, recovered, 1)
	require.Positive(t, recovered[0].Fields["failed_publishes"])
	require.NotEmpty(t, recovered[0].Fields["failed_for"])
	require.Len(t, logsOf(logs, watermill.ErrorLogLevel, failingLog), 1)
	t.Logf("%s: %v", recoveredLog, recovered[0].Fields)
}
