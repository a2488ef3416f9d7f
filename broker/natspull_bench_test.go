package broker

import (
	"context"
	"fmt"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
)

// BenchmarkNATSPullDrain drains a backlog of b.N messages (1 KB, the
// relay's metadata) through one subscription whose handler acks each at
// once, and closes it: every ack sent. It reports messages a second and
// the process's CPU (user and system) per message: the subscriber's, the
// server's not included. Run it with -benchtime=20000x.
func BenchmarkNATSPullDrain(b *testing.B) {
	for _, inFlight := range []int{32, 256} {
		b.Run("max_in_flight="+strconv.Itoa(inFlight), func(b *testing.B) {
			topic := "entoutbox.bench." + randomSuffix()
			rawURL := natsSetup(b, topic) + "?max_in_flight=" + strconv.Itoa(inFlight)
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			br := natsOpen(ctx, b, rawURL)
			natsBacklog(b, br, topic, b.N)

			b.ResetTimer()
			cpu := processCPU()
			// Labelled for the CPU profile (-tagfocus phase=drain): the
			// subscriber's goroutines, its connection's too, inherit it.
			pprof.Do(ctx, pprof.Labels("phase", "drain"), func(ctx context.Context) {
				sub, err := br.Subscriber("g")
				require.NoError(b, err)
				ch, err := sub.Subscribe(ctx, topic)
				require.NoError(b, err)
				for range b.N {
					select {
					case m := <-ch:
						m.Ack()
					case <-ctx.Done():
						b.Fatal(ctx.Err())
					}
				}
				require.NoError(b, sub.Close())
			})
			b.StopTimer()
			cpu = processCPU() - cpu

			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/msg")
			info := natsConsumerState(ctx, b, "g", topic)
			require.Zero(b, info.NumAckPending, "messages delivered and not acked")
			require.Zero(b, info.NumPending, "messages not delivered")
		})
	}
}

// natsBacklog publishes n messages on topic, a thousand awaiting their ack
// at a time.
func natsBacklog(b *testing.B, br Broker, topic string, n int) {
	b.Helper()
	async := br.Publisher().(AsyncPublisher)
	payload := `{"data":"` + strings.Repeat("x", 1000) + `"}`
	slots := make(chan struct{}, 1000)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed error
	for i := range n {
		msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
		msg.Metadata = message.Metadata{
			events.MetaEventName:     "order.paid",
			events.MetaEventVersion:  "1",
			events.MetaAggregateType: "order",
			events.MetaAggregateID:   fmt.Sprintf("order-%d", i%1000),
			events.MetaAggregateSeq:  strconv.Itoa(i/1000 + 1),
			events.MetaCreatedAt:     time.Now().UTC().Format(time.RFC3339Nano),
			events.MetaPublishID:     msg.UUID + "/1",
		}
		slots <- struct{}{}
		wg.Add(1)
		async.PublishAsync(topic, msg, func(err error) {
			if err != nil {
				mu.Lock()
				failed = err
				mu.Unlock()
			}
			<-slots
			wg.Done()
		})
	}
	wg.Wait()
	require.NoError(b, failed)
}

// processCPU is the CPU time the process has spent, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
