package relay_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Three relays share the outbox while one of them is killed with SIGKILL
// every second and started again, during a stream of committed and
// rolled-back transactions from four writers: every committed event
// arrives, none that rolled back, and each aggregate's events first arrive
// in commit order, with at most a batch of duplicates per kill. On
// PostgreSQL they are fast-path relays sharing partitions by claims; on
// MariaDB, poll-path relays sharing the partitions they lease.
// ENTOUTBOX_REPLICA_EVENTS sets the stream's size (the run is
// 100000).
func TestThreeReplicasWithKills(t *testing.T) {
	skipIfShort(t, "kills relay processes")
	t.Parallel()
	for name, setup := range map[string]func(*testing.T) *emitBundle{"PostgreSQL": setupEmit, "MariaDB": setupEmitMySQL} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testThreeReplicasWithKills(t, setup(t))
		})
	}
}

func testThreeReplicasWithKills(t *testing.T, b *emitBundle) {
	bin, err := buildCommand()
	require.NoError(t, err)
	total := 4000
	if v := os.Getenv("ENTOUTBOX_REPLICA_EVENTS"); v != "" {
		total, err = strconv.Atoi(v)
		require.NoError(t, err)
	}
	const natsURL = "nats://127.0.0.1:4222"
	direct := openBroker(t, natsURL, "NATS JetStream at 127.0.0.1:4222")
	prefix := uniquePrefix()
	got := receiveOn(t, direct, prefix)

	// A batch well below the stream, so that the bound on duplicates says
	// something.
	const batchSize = 200
	start := func(i int) *exec.Cmd {
		args := []string{"relay", "--broker", natsURL, "--topic-prefix", prefix, "--batch-size", strconv.Itoa(batchSize),
			"--poll-interval", "50ms", "--retry-interval", "50ms", "--log-level", "error"}
		if !b.mysql { // the fast path's own settings
			args = append(args, "--lease", "2s", "--relay-id", fmt.Sprintf("replica-%d", i))
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "ENTOUTBOX_DATABASE_URL="+b.url)
		cmd.Stderr = os.Stderr
		startDyingWithTest(t, cmd)
		return cmd
	}
	replicas := []*exec.Cmd{start(0), start(1), start(2)}
	t.Cleanup(func() {
		for _, r := range replicas {
			_ = r.Process.Kill()
			_ = r.Wait()
		}
	})

	// Four writers, each with aggregates of its own; one transaction in
	// five rolls back.
	var (
		mu   sync.Mutex
		want = emitted{ids: map[string]bool{}, rolledBack: map[string]bool{}, perAggregate: map[string][]string{}}
		wg   sync.WaitGroup
	)
	for w := range 4 {
		wg.Go(func() {
			e := emitOrdersAs(t, b.client, fmt.Sprintf("w%d", w), total/4, 50, 5)
			mu.Lock()
			defer mu.Unlock()
			want.add(e)
		})
	}
	emitting := make(chan struct{})
	go func() { wg.Wait(); close(emitting) }()

	kills := 0
	for done := false; !done; {
		select {
		case <-emitting:
			done = true
		case <-time.After(time.Second):
			i := rand.IntN(len(replicas))
			require.NoError(t, replicas[i].Process.Signal(syscall.SIGKILL))
			_ = replicas[i].Wait()
			replicas[i] = start(i)
			kills++
		}
	}
	got.waitFor(t, want, patience)
	waitDelivered(t, b, 0)

	got.mu.Lock()
	dups := 0
	for id, n := range got.count {
		require.False(t, want.rolledBack[id], "event %s of a rolled-back transaction was delivered", id)
		require.True(t, want.ids[id], "unknown event %s", id)
		dups += n - 1
	}
	got.mu.Unlock()
	first := got.firstSeen()
	for agg, ids := range want.perAggregate {
		require.Equal(t, ids, first[agg], "order of aggregate %s", agg)
	}
	t.Logf("%d committed events, %d rolled back, %d kills, %d duplicates seen by the consumer (bound %d)",
		len(want.ids), len(want.rolledBack), kills, dups, kills*batchSize)
	// A killed relay publishes again at most what it had published and not
	// recorded, at most a batch. JetStream drops most of those repeats by
	// Nats-Msg-Id, so this bounds what the consumer sees, not what the
	// relays republished.
	require.LessOrEqual(t, dups, kills*batchSize, "duplicates beyond a batch per kill")
}
