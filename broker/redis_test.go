package broker

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// redisWhole is the URL option keeping a topic in one stream, for the tests
// of what a member does on a stream (its order is the stream's).
const redisWhole = "?partitions=0"

// redisSetup deletes the streams of the test's topic (and its partitions).
func redisSetup(t *testing.T, topic string) string {
	need(t, "Redis", redisURL)
	t.Cleanup(func() {
		opts, err := redis.ParseURL(redisURL)
		if err != nil {
			t.Logf("cleaning up: %v", err)
			return
		}
		c := redis.NewClient(opts)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		keys, err := c.Keys(ctx, topic+"."+partitionMark+"*").Result()
		if err == nil {
			err = c.Del(ctx, append(keys, topic)...).Err()
		}
		if err != nil {
			t.Logf("deleting the streams of %s: %v", topic, err)
		}
	})
	return redisURL
}

func TestRedisGroupShares(t *testing.T) {
	t.Parallel()
	topic := "entoutbox.share." + randomSuffix()
	testGroupShares(t, redisSetup(t, topic), topic)
}

// A nacked entry goes back to the group: the member that nacked it gets
// the next entry, not the same one again, and the entry comes back within
// a claim round. The module alone hands it to the same member again at
// once, for as long as it is nacked, and what it read ahead waits.
func TestRedisNackGivesTheEntryBackToTheGroup(t *testing.T) {
	t.Parallel()
	ctx, b, topic := openRedisWhole(t, "nack")
	_, ch := redisMember(ctx, t, b, topic)
	sent := newMessages(2)
	publish(t, b, topic, sent)

	first := unacked(ctx, t, ch)
	require.Equal(t, sent[0].uuid, first.UUID)
	first.Nack()
	next := unacked(ctx, t, ch)
	require.Equal(t, sent[1].uuid, next.UUID, "the member moved on")
	next.Ack()
	again := unacked(ctx, t, ch)
	require.Equal(t, sent[0].uuid, again.UUID, "the nacked entry came back")
	again.Ack()
	assertNothingMore(t, ch, 1500*time.Millisecond)
}

// A member closed with entries it read and did not ack gives them back:
// another member gets them within seconds, not after the 60 s idle time
// the module claims after.
func TestRedisCloseGivesPendingEntriesBack(t *testing.T) {
	t.Parallel()
	ctx, b, topic := openRedisWhole(t, "close")
	leaving, ch := redisMember(ctx, t, b, topic)
	sent := newMessages(3)
	publish(t, b, topic, sent)
	held := unacked(ctx, t, ch) // the others are read ahead
	require.Equal(t, sent[0].uuid, held.UUID)
	time.Sleep(300 * time.Millisecond) // the module reads ahead
	require.NoError(t, leaving.Close())

	staying, err := b.Subscriber("g")
	require.NoError(t, err)
	ch2, err := staying.Subscribe(ctx, topic)
	require.NoError(t, err)
	wctx, wcancel := context.WithTimeout(ctx, 40*time.Second) // the module's own claim comes after 60 s
	defer wcancel()
	got := receive(wctx, t, ch2, len(sent))
	for _, m := range got {
		m.Ack()
	}
	assertSame(t, sent, got, false)
}

// openRedisWhole opens a broker on a fresh topic kept in one stream,
// "entoutbox.<kind>.<random>", closed and deleted when the test ends.
func openRedisWhole(t *testing.T, kind string) (context.Context, Broker, string) {
	t.Helper()
	topic := "entoutbox." + kind + "." + randomSuffix()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	t.Cleanup(cancel)
	b, err := Open(ctx, redisSetup(t, topic)+redisWhole, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return ctx, b, topic
}

// redisMember is a member of group g subscribed to topic.
func redisMember(ctx context.Context, t *testing.T, b Broker, topic string) (message.Subscriber, <-chan *message.Message) {
	t.Helper()
	s, err := b.Subscriber("g")
	require.NoError(t, err)
	ch, err := s.Subscribe(ctx, topic)
	require.NoError(t, err)
	return s, ch
}

// unacked takes the next message from ch, leaving it to the caller to ack
// or nack.
func unacked(ctx context.Context, t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		require.True(t, ok, "subscription closed")
		return m
	case <-ctx.Done():
		t.Fatalf("no message: %v", ctx.Err())
		return nil
	}
}

// killRedisMember stops s as a dying process does: nothing it holds is
// acked or given back, and it no longer touches its entries.
func killRedisMember(s message.Subscriber) {
	rs := s.(partitionSubscriber).Subscriber.(*redisSubscriber)
	rs.closeOnce.Do(func() {
		rs.mu.Lock()
		rs.stopped = true
		rs.mu.Unlock()
		close(rs.stopping)
		rs.forwarders.Wait()
		rs.keeping.Wait()
		rs.closeErr = rs.sub.Close()
		close(rs.closed)
	})
}

// A member that dies without Close leaves what it held pending under its
// name: another member claims it after redisClaimIdle (seconds), not after
// the module's 60 s.
func TestRedisKilledMemberEntriesComeBackInSeconds(t *testing.T) {
	t.Parallel()
	ctx, b, topic := openRedisWhole(t, "kill")
	dying, ch := redisMember(ctx, t, b, topic)
	sent := newMessages(3)
	publish(t, b, topic, sent)
	held := unacked(ctx, t, ch)
	require.Equal(t, sent[0].uuid, held.UUID)
	time.Sleep(300 * time.Millisecond) // the module reads ahead
	killRedisMember(dying)

	staying, err := b.Subscriber("g")
	require.NoError(t, err)
	defer staying.Close()
	ch2, err := staying.Subscribe(ctx, topic)
	require.NoError(t, err)
	began := time.Now()
	wctx, wcancel := context.WithTimeout(ctx, 40*time.Second) // the module's own claim comes after 60 s
	defer wcancel()
	got := receive(wctx, t, ch2, len(sent))
	for _, m := range got {
		m.Ack()
	}
	assertSame(t, sent, got, false)
	t.Logf("the dead member's entries came back in %s", time.Since(began).Round(100*time.Millisecond))
}

// A member hands several entries of a stream out at once, each pending
// until the consumer settles it: one the consumer holds (an event waiting
// for its aggregate's previous one) does not keep back those behind it, an
// ack XACKs that entry alone, and a nack gives it back to the group,
// which delivers it again.
func TestRedisHandsSeveralEntriesOutAtOnce(t *testing.T) {
	t.Parallel()
	topic := "entoutbox.window." + randomSuffix()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	b, err := Open(ctx, redisSetup(t, topic)+redisWhole, Options{})
	require.NoError(t, err)
	defer b.Close()
	sub, err := b.Subscriber("g")
	require.NoError(t, err)
	defer sub.Close()
	ch, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	sent := newMessages(5)
	publish(t, b, topic, sent)
	held := make([]*message.Message, len(sent))
	for i := range held {
		held[i] = unacked(ctx, t, ch) // none acked: the module alone would hand out the first only
	}
	opts, err := redis.ParseURL(redisURL)
	require.NoError(t, err)
	c := redis.NewClient(opts)
	defer c.Close()
	pendingNow := func() int64 {
		p, err := c.XPending(ctx, topic, "g").Result()
		require.NoError(t, err)
		return p.Count
	}
	require.Equal(t, int64(5), pendingNow(), "all five pending until settled")
	held[4].Ack()
	held[0].Nack()
	again := unacked(ctx, t, ch)
	require.Equal(t, held[0].UUID, again.UUID, "the nacked entry comes again")
	again.Ack()
	for _, m := range held[1:4] {
		m.Ack()
	}
	for pendingNow() != 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("%d entries still pending after every ack", pendingNow())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// The module's XACK of an entry that is not being handed over (a hand-over
// that gave up waiting for it when its subscription ended, or an entry its
// claim found deleted) is not sent: the entry is given back to the group,
// never acknowledged before the consumer settled it.
func TestRedisModuleXAckOutsideAHandOverGivesTheEntryBack(t *testing.T) {
	t.Parallel()
	topic := "entoutbox.xack." + randomSuffix()
	redisSetup(t, topic)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	opts, err := redis.ParseURL(redisURL)
	require.NoError(t, err)
	raw := redis.NewClient(opts)
	defer raw.Close()
	require.NoError(t, raw.XGroupCreateMkStream(ctx, topic, "g", "0").Err())
	id, err := raw.XAdd(ctx, &redis.XAddArgs{Stream: topic, Values: map[string]any{"k": "v"}}).Result()
	require.NoError(t, err)
	c := newRedisMemberClient(redis.NewClient(opts), "g", "me")
	defer c.Close()
	_ = c.startReading(topic)
	read, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "me", Streams: []string{topic, ">"}, Count: 1}).Result()
	require.NoError(t, err)
	require.Equal(t, id, read[0].Messages[0].ID)
	require.NoError(t, c.XAck(ctx, topic, "g", id).Err())
	pending, err := raw.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: topic, Group: "g", Start: "-", End: "+", Count: 10}).Result()
	require.NoError(t, err)
	require.Len(t, pending, 1, "still pending: not acknowledged")
	require.GreaterOrEqual(t, pending[0].Idle, redisClaimIdle, "given back: the next claim round takes it")
	require.Empty(t, c.holding()[topic], "no longer held (kept alive) by this member")
}

// A member that died without Close leaves the group once another member
// took what it held and it has been idle redisConsumerTimeout: a restart
// does not leave members behind for good. Not parallel: it shortens the
// timeout for the brokers it opens.
func TestRedisDeadMemberLeavesTheGroup(t *testing.T) {
	timeout, check := redisConsumerTimeout, redisCheckConsumers
	redisConsumerTimeout, redisCheckConsumers = 3*time.Second, 500*time.Millisecond
	defer func() { redisConsumerTimeout, redisCheckConsumers = timeout, check }()
	ctx, b, topic := openRedisWhole(t, "leave")
	dying, ch := redisMember(ctx, t, b, topic)
	sent := newMessages(2)
	publish(t, b, topic, sent)
	unacked(ctx, t, ch)
	dead := dying.(partitionSubscriber).Subscriber.(*redisSubscriber).client.consumer
	killRedisMember(dying)

	staying, err := b.Subscriber("g")
	require.NoError(t, err)
	defer staying.Close()
	ch2, err := staying.Subscribe(ctx, topic)
	require.NoError(t, err)
	for _, m := range receive(ctx, t, ch2, len(sent)) {
		m.Ack()
	}
	opts, err := redis.ParseURL(redisURL)
	require.NoError(t, err)
	c := redis.NewClient(opts)
	defer c.Close()
	for {
		members, err := c.XInfoConsumers(ctx, topic, "g").Result()
		require.NoError(t, err)
		if !slices.ContainsFunc(members, func(m redis.XInfoConsumer) bool { return m.Name == dead }) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the dead member %s is still in the group after %s: %+v", dead, patience, members)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// A live member's entries are not claimed from it however long its
// handler holds them: it touches them, and their idle time never reaches
// redisClaimIdle.
func TestRedisLiveMemberKeepsWhatItHolds(t *testing.T) {
	t.Parallel()
	ctx, b, topic := openRedisWhole(t, "keep")
	holder, ch := redisMember(ctx, t, b, topic)
	sent := newMessages(1)
	publish(t, b, topic, sent)
	held := unacked(ctx, t, ch)

	other, err := b.Subscriber("g")
	require.NoError(t, err)
	defer other.Close()
	ch2, err := other.Subscribe(ctx, topic)
	require.NoError(t, err)
	assertNothingMore(t, ch2, 3*redisClaimIdle) // held three times the claim idle
	// Nor claimed by its own member's claim round, which would deliver it
	// to it again: still delivered once, to its member.
	opts, err := redis.ParseURL(redisURL)
	require.NoError(t, err)
	c := redis.NewClient(opts)
	defer c.Close()
	pending, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: topic, Group: "g", Start: "-", End: "+", Count: 10}).Result()
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Equal(t, holder.(partitionSubscriber).Subscriber.(*redisSubscriber).client.consumer, pending[0].Consumer)
	require.EqualValues(t, 1, pending[0].RetryCount, "times delivered")
	held.Ack()
	assertNothingMore(t, ch2, 2*time.Second)
}

// What the module takes for a subscription that ended (its read and claim
// loops outlive it by a round) is given back to the group at once, even
// while another subscription of the member reads the stream: held, it
// would be kept alive by a member that never hands it over.
func TestRedisTakeForAnEndedReadIsGivenBack(t *testing.T) {
	t.Parallel()
	topic := "entoutbox.late." + randomSuffix()
	redisSetup(t, topic)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	opts, err := redis.ParseURL(redisURL)
	require.NoError(t, err)
	raw := redis.NewClient(opts)
	defer raw.Close()
	require.NoError(t, raw.XGroupCreateMkStream(ctx, topic, "g", "0").Err())
	id, err := raw.XAdd(ctx, &redis.XAddArgs{Stream: topic, Values: map[string]any{"k": "v"}}).Result()
	require.NoError(t, err)
	c := newRedisMemberClient(redis.NewClient(opts), "g", "me")
	defer c.Close()
	ended := c.startReading(topic)
	_ = c.startReading(topic) // the partition came back: a second read
	require.Empty(t, c.stopReading(ended), "the ended read had taken nothing")
	read, err := c.XReadGroup(context.WithValue(ctx, redisReadKey{}, ended),
		&redis.XReadGroupArgs{Group: "g", Consumer: "me", Streams: []string{topic, ">"}, Count: 1}).Result()
	require.NoError(t, err)
	require.Empty(t, read, "not handed to the ended read")
	pending, err := raw.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: topic, Group: "g", Start: "-", End: "+", Count: 10}).Result()
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Equal(t, id, pending[0].ID)
	require.GreaterOrEqual(t, pending[0].Idle, redisClaimIdle, "given back: the next claim round takes it")
	require.Empty(t, c.holding()[topic], "not held (kept alive) by this member")
}

// A hand-over that gave up waiting for the module's XACK of its message
// does not get the XACK of the next one: a late XACK, made with the
// earlier message's context, goes back to the group, and the next
// hand-over gets its own message's id. Taking the late one would have the
// consumer's ack of the next message XACK an entry it never saw.
func TestRedisLateXAckIsNotTheNextHandOvers(t *testing.T) {
	t.Parallel()
	topic := "entoutbox.lateack." + randomSuffix()
	redisSetup(t, topic)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	opts, err := redis.ParseURL(redisURL)
	require.NoError(t, err)
	raw := redis.NewClient(opts)
	defer raw.Close()
	require.NoError(t, raw.XGroupCreateMkStream(ctx, topic, "g", "0").Err())
	for range 2 {
		require.NoError(t, raw.XAdd(ctx, &redis.XAddArgs{Stream: topic, Values: map[string]any{"k": "v"}}).Err())
	}
	c := newRedisMemberClient(redis.NewClient(opts), "g", "me")
	defer c.Close()
	read, err := raw.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "me", Streams: []string{topic, ">"}, Count: 2}).Result()
	require.NoError(t, err)
	first, second := read[0].Messages[0].ID, read[0].Messages[1].ID

	late := message.NewMessage("late", nil)
	late.SetContext(context.WithValue(ctx, redisReadKey{}, "late's read"))
	_, ok := c.takeOver(topic, late) // nobody XACKs it in time
	require.False(t, ok)

	next := message.NewMessage("next", nil)
	next.SetContext(context.WithValue(ctx, redisReadKey{}, "next's read"))
	got := make(chan string, 1)
	go func() {
		id, _ := c.takeOver(topic, next)
		got <- id
	}()
	require.Eventually(t, func() bool {
		select {
		case <-next.Acked():
			return true
		default:
			return false
		}
	}, patience, time.Millisecond, "the hand-over acks the next message")
	require.NoError(t, c.XAck(late.Context(), topic, "g", first).Err()) // the module's late XACK of the first
	require.NoError(t, c.XAck(next.Context(), topic, "g", second).Err())
	require.Equal(t, second, <-got, "the next hand-over gets its own message's entry")
	pending, err := raw.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: topic, Group: "g", Start: first, End: first, Count: 1}).Result()
	require.NoError(t, err)
	require.Len(t, pending, 1, "the late one's entry is still pending")
	require.GreaterOrEqual(t, pending[0].Idle, redisClaimIdle, "given back: the next claim round takes it")
}
