package relay_test

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// vmHWM is the peak resident memory of process pid, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	require.NoError(t, err)
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// The relay command drains 40 rows of 10 MB with its memory bounded by
// --max-bytes-in-flight (64 MiB by default), not by the 400 MB of the
// backlog: its peak resident memory stays far below it.
func TestRelayCommandMemoryBoundedByBytes(t *testing.T) {
	skipIfShort(t, "drains large rows through the relay command")
	t.Parallel()
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc to read a process's memory from")
	}
	bin, err := buildCommand()
	require.NoError(t, err)
	b := setupEmit(t)
	const rows, size = 40, 10 << 20
	_, err = b.db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type,
		aggregate_id, payload) SELECT gen_random_uuid(), 'order.paid', 1, 'orders', 'Order', 'big-' || g,
		('{"blob":"' || repeat('x', $1::int) || '"}')::jsonb FROM generate_series(1, $2::int) g`, size, rows)
	require.NoError(t, err)

	// The broker is PostgreSQL itself, in the test's schema: it keeps
	// nothing in the relay's memory.
	cmd := exec.Command(bin, "relay", "--broker", b.db.URL, "--poll-interval", "50ms", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "ENTOUTBOX_DATABASE_URL="+b.db.URL)
	logs := &lockedBuffer{}
	cmd.Stderr = logs
	started := time.Now()
	startDyingWithTest(t, cmd)
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var peak int64
	require.Eventually(t, func() bool {
		peak = max(peak, vmHWM(t, cmd.Process.Pid))
		var pending int
		require.NoError(t, b.db.DB.QueryRow(`SELECT count(*) FROM outbox_events WHERE delivered_at IS NULL`).Scan(&pending))
		return pending == 0
	}, patience, 50*time.Millisecond, "rows still pending; relay logs:\n%s", logs.String())
	peak = max(peak, vmHWM(t, cmd.Process.Pid))
	t.Logf("%d rows of %d MB drained in %s, peak resident memory %d MB", rows, size>>20, time.Since(started).Round(time.Millisecond), peak>>20)
	require.Less(t, peak, int64(400<<20), "the relay's memory grew with the backlog")
}
