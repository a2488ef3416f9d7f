package relay_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// buildCommand builds cmd/entoutbox once per test binary.
var buildCommand = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "entoutbox-cmd")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "entoutbox")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/entoutbox").CombinedOutput()
	if err != nil {
		return "", &buildError{out: string(out), err: err}
	}
	return bin, nil
})

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + ":\n" + e.out }

// The relay process is killed with SIGKILL mid-stream and restarted, again
// and again: every committed event arrives, the first arrivals of each
// aggregate in its order, and the duplicates are at most the batch in
// flight at each kill.
func TestRelayKilledMidStream(t *testing.T) {
	skipIfShort(t, "kills relay processes")
	t.Parallel()
	forPathsOf(t, everyDatabase, testRelayKilledMidStream)
}

func testRelayKilledMidStream(t *testing.T, p *onPath) {
	bin, err := buildCommand()
	require.NoError(t, err)
	// Redis Streams keeps every publish: duplicates show (JetStream would
	// drop them by message id).
	const brokerURL = "redis://127.0.0.1:6379/0"
	direct := openBroker(t, brokerURL, "Redis at 127.0.0.1:6379")
	prefix := uniquePrefix()
	got := receiveOn(t, direct, prefix)

	const batch = 20
	start := func() (*exec.Cmd, *lockedBuffer) {
		cmd := exec.Command(bin, append(p.relayArgs(), "--broker", brokerURL, "--topic-prefix", prefix,
			"--batch-size", fmt.Sprint(batch), "--log-level", "info")...)
		cmd.Env = append(os.Environ(), "ENTOUTBOX_DATABASE_URL="+p.url)
		logs := &lockedBuffer{}
		cmd.Stderr = logs
		startDyingWithTest(t, cmd)
		return cmd, logs
	}

	// Events are committed in rounds of 400 until a relay was killed while
	// it made progress with events still being committed (on a loaded
	// machine a relay may take longer to start than a round to commit).
	var midStreamKilled atomic.Bool
	emitDone := make(chan emitted, 1)
	go func() {
		want := emitted{ids: map[string]bool{}, rolledBack: map[string]bool{}, perAggregate: map[string][]string{}}
		for round := 0; round == 0 || !midStreamKilled.Load() && round < 10; round++ {
			want.add(emitOrdersAs(t, p.client, fmt.Sprintf("order%d", round), 400, 10, 5))
		}
		emitDone <- want
	}()

	// Kill a relay as soon as it has made progress, again and again, while
	// events are still being committed.
	kills, midStream := 0, 0
	var want emitted
	for emitting := true; emitting || kills < 2; {
		before := got.distinct()
		cmd, _ := start()
		progressed := func() bool { return got.distinct() > before }
		// A relay started after a kill may wait for the killed one's lease
		// (the poll path's) before it sends: wait longer than that.
		for deadline := time.Now().Add(20 * time.Second); !progressed() && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		select {
		case want = <-emitDone:
			emitting = false
		default:
			if progressed() {
				midStream++
				midStreamKilled.Store(true)
			}
		}
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		kills++
	}
	require.Positive(t, midStream, "no kill happened mid-stream")
	final, logs := start()
	got.waitFor(t, want, patience)
	stopGracefully(t, final, logs)
	dups := got.duplicatesOf(t, want)
	t.Logf("%d events, %d kills (%d mid-stream), %d duplicates", len(want.ids), kills, midStream, dups)
	require.LessOrEqual(t, dups, kills*batch, "duplicates beyond the batches in flight at the kills")
	first := got.firstSeen()
	for agg, ids := range want.perAggregate {
		require.Equal(t, ids, first[agg], "first arrivals of aggregate %s in its order", agg)
	}
}

// stopGracefully stops a relay child with SIGTERM once its signal handler
// is in place: it must exit 0, saying it stopped.
func stopGracefully(t *testing.T, cmd *exec.Cmd, logs *lockedBuffer) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "Relay running") }, patience, 10*time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), "relay logs:\n%s", logs.String())
	require.Contains(t, logs.String(), "Relay stopped")
}

// duplicatesOf checks that r holds events of want only, none rolled back,
// and returns how many deliveries came more than once.
func (r *received) duplicatesOf(t *testing.T, want emitted) int {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	dups := 0
	for id, n := range r.count {
		require.False(t, want.rolledBack[id], "event %s of a rolled-back transaction was delivered", id)
		require.True(t, want.ids[id], "unknown event %s", id)
		dups += n - 1
	}
	return dups
}

// lockedBuffer collects a child's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
