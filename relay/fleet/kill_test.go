package fleet_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay/fleet"
)

// buildCommand builds cmd/entoutbox once per test binary.
var buildCommand = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "entoutbox-cmd")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "entoutbox")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/entoutbox").CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w:\n%s", err, out)
	}
	return bin, nil
})

// redisArrivals is every delivery on a topic of Redis Streams, which
// keeps each publish: a duplicate shows.
type redisArrivals struct {
	mu    sync.Mutex
	count map[string]int
	first map[string][]string    // aggregate: event ids in order of first arrival
	at    map[string][]time.Time // tenant: arrival times
}

func receiveRedis(t *testing.T, topic string) *redisArrivals {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	b, err := broker.Open(ctx, "redis://127.0.0.1:6379/0", broker.Options{})
	if err != nil {
		pgtest.Unavailable(t, "Redis at 127.0.0.1:6379", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	sub, err := b.Subscriber(topic + "_receiver")
	require.NoError(t, err)
	msgs, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	a := &redisArrivals{count: map[string]int{}, first: map[string][]string{}, at: map[string][]time.Time{}}
	go func() {
		for msg := range msgs {
			a.mu.Lock()
			a.count[msg.UUID]++
			if a.count[msg.UUID] == 1 {
				agg := msg.Metadata.Get(events.MetaAggregateID)
				a.first[agg] = append(a.first[agg], msg.UUID)
			}
			tenant := msg.Metadata.Get(events.MetaTenant)
			a.at[tenant] = append(a.at[tenant], time.Now())
			a.mu.Unlock()
			msg.Ack()
		}
	}()
	return a
}

// fleetProcess is one `entoutbox relay --databases-file` child.
type fleetProcess struct {
	cmd  *exec.Cmd
	logs *lockedLog
}

type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Three relay processes share nine tenants' databases through a members
// database while writers commit to every tenant; one is killed with
// SIGKILL. Its tenants are relayed again by the two others once its
// heartbeat and its relays' partition leases lapse: every committed event
// arrives, the first arrivals of each aggregate in commit order, and the
// duplicates are at most the batches in flight at the kill.
func TestFleetProcessKilledHandsItsTenantsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("kills relay processes")
	}
	t.Parallel()
	bin, err := buildCommand()
	require.NoError(t, err)
	prefix := "fleetkill_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "") + "_"
	got := receiveRedis(t, prefix+"orders")
	names := []string{"acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "tyrell", "cyberdyne"}
	dbs := map[string]*tenantDB{}
	var entries []fleet.Tenant
	for _, n := range names {
		dbs[n] = newTenantDB(t, true)
		entries = append(entries, dbs[n].bySchema(n))
	}
	file := filepath.Join(t.TempDir(), "databases.json")
	writeFile(t, file, entries...)
	members := pgtest.New(t)

	const batch = 20
	start := func(id string) *fleetProcess {
		cmd := exec.Command(bin, "relay", "--databases-file", file, "--fleet-database-url", members.URL, "--fleet-member-id", id,
			"--fleet-member-timeout", "2s", "--lease", "3s", "--poll-interval", "100ms", "--batch-size", fmt.Sprint(batch),
			"--broker", "redis://127.0.0.1:6379/0", "--topic-prefix", prefix, "--log-level", "info")
		cmd.Env = withoutDatabaseURL(os.Environ())
		p := &fleetProcess{cmd: cmd, logs: &lockedLog{}}
		cmd.Stderr = p.logs
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		})
		return p
	}
	procs := []*fleetProcess{start("member-0"), start("member-1"), start("member-2")}

	ctx, stopWriting := context.WithCancel(context.Background())
	defer stopWriting()
	var wg sync.WaitGroup
	want := make([]map[string][]string, len(names))
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want[i] = writeUntil(ctx, t, dbs[n], n)
		}()
	}
	time.Sleep(4 * time.Second) // the members settle, every relay publishes
	require.NoError(t, procs[0].cmd.Process.Signal(syscall.SIGKILL))
	_ = procs[0].cmd.Wait()
	killedAt := time.Now()
	time.Sleep(8 * time.Second) // the heartbeat lapses (2s), then the leases (3s)
	stopWriting()
	wg.Wait()

	total := 0
	for i := range names {
		for _, ids := range want[i] {
			total += len(ids)
		}
	}
	require.Eventually(t, func() bool {
		got.mu.Lock()
		defer got.mu.Unlock()
		for i := range names {
			for _, ids := range want[i] {
				for _, id := range ids {
					if got.count[id] == 0 {
						return false
					}
				}
			}
		}
		return true
	}, patience, 50*time.Millisecond, "every committed event arrives; logs of the killed process:\n%s", procs[0].logs)
	for _, p := range procs[1:] {
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		require.NoError(t, p.cmd.Wait(), "logs:\n%s", p.logs)
		require.Contains(t, p.logs.String(), "Relay fleet stopped")
	}

	got.mu.Lock()
	defer got.mu.Unlock()
	dups := 0
	for _, c := range got.count {
		dups += c - 1
	}
	for i := range names {
		for agg, ids := range want[i] {
			require.Equal(t, ids, got.first[agg], "first arrivals of aggregate %s in commit order", agg)
		}
	}
	stalled := longestGapAfter(got.at, killedAt)
	t.Logf("%d events over %d tenants, %d duplicates; the longest wait of a tenant after the kill: %s", total, len(names), dups,
		stalled.Round(time.Millisecond))
	require.LessOrEqual(t, dups, 3*batch, "duplicates beyond the batches in flight at the kill")
	require.GreaterOrEqual(t, stalled, time.Second, "no tenant waited for the killed process's heartbeat: it relayed none")
}

// writeUntil commits an OrderPaid every 20 ms to tenant's database over 3
// aggregates until ctx ends, returning the ids per aggregate in commit
// order.
func writeUntil(ctx context.Context, t *testing.T, d *tenantDB, tenant string) map[string][]string {
	out := map[string][]string{}
	for i := 0; ctx.Err() == nil; i++ {
		agg := fmt.Sprintf("%s-order-%d", tenant, i%3)
		id := uuid.New()
		err := d.client.WithTx(context.Background(), func(tx *testent.Tx) error {
			return tx.Outbox.EmitOrderPaid(context.Background(), agg, testent.OrderPaid{OrderID: int64(i), AmountCents: 100},
				events.WithEventID(id))
		})
		if err != nil {
			t.Errorf("tenant %s: emit: %v", tenant, err)
			return out
		}
		out[agg] = append(out[agg], id.String())
		time.Sleep(20 * time.Millisecond)
	}
	return out
}

// longestGapAfter is the longest time a tenant went without an arrival
// from since on, up to its next arrival.
func longestGapAfter(at map[string][]time.Time, since time.Time) time.Duration {
	var longest time.Duration
	for _, times := range at {
		last := since
		for _, a := range times {
			if a.Before(since) {
				continue
			}
			longest = max(longest, a.Sub(last))
			last = a
		}
	}
	return longest
}

// withoutDatabaseURL is env without the variables that name one database,
// which the command refuses beside --databases-file.
func withoutDatabaseURL(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "ENTOUTBOX_DATABASE_URL=") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			out = append(out, kv)
		}
	}
	return out
}
