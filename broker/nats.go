package broker

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/entoutbox/entoutbox/events"
)

// NATS JetStream: publishing through watermill-nats/v2's pkg/nats (the
// module's own pkg/jetstream is marked beta), subscribing through our own
// pull subscriber (natspull.go).
//
// Topology, provisioned here rather than by the module's AutoProvision, whose
// stream is named after the topic verbatim (so a topic such as
// "orders.created" cannot have one) and which asks the server on every
// Publish:
//   - topic T is carried by the stream that already captures subject T, or
//     else by a new stream named natsName(T) with the single subject T
//     (limits retention, file storage, the server's 2-minute duplicate window);
//   - group G on topic T is the durable pull consumer
//     natsName(G+"-"+T)+"_pull" of that stream, explicit acks, delivering
//     from the first message, holding at most max_ack_pending messages
//     delivered and not yet acked among all of G's members. Earlier
//     versions made a durable push consumer natsName(G+"-"+T), with
//     deliver group natsName(G); the first Subscribe of G on T replaces it
//     with the pull consumer, starting where it left off (see
//     ensureConsumer).
//
// A subscriber that creates a topic's stream logs it at Info: no producer
// has published on that topic yet, which for a consumer usually means its
// topic prefix differs from the relay's.
//
// Messages use the module's NATSMarshaler's format (payload as body, UUID and
// metadata as headers) plus the header Nats-Msg-Id, which JetStream uses to
// drop a message published again within the duplicate window: the
// message's events.MetaPublishID where it has one (one per outbox row and
// per replay, so a retried or replayed event is stored again), else its
// UUID. A publish acked as a duplicate of another message is an error
// (*DuplicateError), not a delivery. A
// message whose headers are not one value per key is delivered, not refused:
// see natsMarshaler.Unmarshal.

// natsAckWait is how long JetStream waits for a word from the member
// holding a message (an ack, a nack, or that it is still in progress)
// before it delivers the message again, unless the URL sets ?ack_wait=.
const natsAckWait = 30 * time.Second

// natsMaxAckPending bounds the messages a group's members hold together,
// delivered and not yet acked, unless the URL sets ?max_ack_pending=:
// JetStream's own default.
const natsMaxAckPending = 1000

// natsParams are the URL's options for the broker rather than nats.Connect.
type natsParams struct {
	ackWait       time.Duration
	maxAckPending int
	maxInFlight   int
	partitions    int // of the streams made for topics
}

// natsParamsOf reads ?ack_wait=, ?max_ack_pending= and ?max_in_flight=
// off the URL and returns the URL without them for nats.Connect.
func natsParamsOf(u *url.URL, raw string) (natsParams, string, error) {
	p := natsParams{ackWait: natsAckWait, maxAckPending: natsMaxAckPending, maxInFlight: natsMaxInFlight,
		partitions: DefaultPartitions}
	var err error
	if p.partitions, _, raw, err = partitionsParam(u, raw, natsMaxPartitions); err != nil {
		return p, "", err
	}
	if u, err = url.Parse(raw); err != nil {
		return p, "", err
	}
	q := u.Query()
	if !q.Has("ack_wait") && !q.Has("max_ack_pending") && !q.Has("max_in_flight") {
		return p, raw, nil
	}
	if v := q.Get("ack_wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return p, "", fmt.Errorf("ack_wait=%q is not a positive duration", v)
		}
		p.ackWait = d
	}
	for name, n := range map[string]*int{"max_ack_pending": &p.maxAckPending, "max_in_flight": &p.maxInFlight} {
		if v := q.Get(name); v != "" {
			var err error
			if *n, err = strconv.Atoi(v); err != nil || *n <= 0 {
				return p, "", fmt.Errorf("%s=%q is not a positive number", name, v)
			}
		}
		q.Del(name)
	}
	q.Del("ack_wait")
	clean := *u
	clean.RawQuery = q.Encode()
	return p, clean.String(), nil
}

// natsProvisionTimeout bounds the stream and consumer requests made before a
// Publish or Subscribe.
const natsProvisionTimeout = 10 * time.Second

func natsOptions() []nats.Option {
	return []nats.Option{
		nats.Name("entoutbox"),
		nats.Timeout(connectTimeout),
		// A relay outlives broker restarts: reconnect for ever. Nothing is
		// lost meanwhile: a Publish waits for JetStream's ack and fails
		// without it.
		nats.MaxReconnects(-1),
	}
}

func openNATS(ctx context.Context, u *url.URL, raw string, logger watermill.LoggerAdapter) (*pubSub, error) {
	params, raw, err := natsParamsOf(u, raw)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	nc, err := bounded(ctx, func() (*nats.Conn, error) { return nats.Connect(raw, natsOptions()...) }, (*nats.Conn).Close)
	if err != nil {
		return nil, fmt.Errorf("connecting: %w", err)
	}
	js, err := jetstream.New(nc)
	if err == nil {
		_, err = js.AccountInfo(ctx)
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("checking JetStream: %w", err)
	}
	topo := &natsTopology{ackWait: params.ackWait, maxAckPending: params.maxAckPending, partitions: params.partitions,
		logger: logger}
	pub, err := wmnats.NewPublisherWithNatsConn(nc, wmnats.PublisherPublishConfig{
		Marshaler:         natsMarshaler{},
		SubjectCalculator: wmnats.DefaultSubjectCalculator,
	}, logger)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("creating publisher: %w", err)
	}
	async, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(natsAsyncMaxPending),
		jetstream.WithPublishAsyncTimeout(natsAsyncTimeout))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("opening JetStream: %w", err)
	}
	np := &natsPublisher{Publisher: pub, js: js, async: async, topo: topo, acks: make(chan natsPending, natsAsyncMaxPending),
		closed: make(chan struct{})}
	go np.confirm()
	return &pubSub{
		pub:   np,
		async: np.PublishAsync,
		// A JetStream request: the server answers, and JetStream with it.
		ping: func(ctx context.Context) error {
			if _, err := js.AccountInfo(ctx); err != nil {
				return fmt.Errorf("JetStream does not answer: %w", err)
			}
			return nil
		},
		newSub: func(group string) (message.Subscriber, error) {
			return newNATSSubscriber(raw, group, topo, params.maxInFlight, logger)
		},
	}, nil
}

// natsConsumerName names group's durable consumer of topic; the topic is part
// of it because one stream may carry several topics.
func natsConsumerName(group, topic string) string { return natsName(group+"-"+topic) + "_pull" }

// natsPushConsumerName is the name of the durable push consumer earlier
// versions made for group's messages of topic.
func natsPushConsumerName(group, topic string) string { return natsName(group + "-" + topic) }

// natsTopology remembers which stream carries each topic, so that only the
// first Publish or Subscribe of a topic asks the server.
type natsTopology struct {
	streams       sync.Map // topic → natsStream
	ackWait       time.Duration
	maxAckPending int
	partitions    int // of the streams it makes
	logger        watermill.LoggerAdapter
}

// natsStream is the stream carrying a topic.
type natsStream struct {
	name string
	// partitions is how many partition subjects of the topic it has
	// (natsPartitionSubject 0 to partitions-1); 0 when the topic is one
	// subject.
	partitions int
	subjects   []string // the stream's
}

// ensureStream returns the stream carrying topic, creating one when none
// does; created says it did.
func (t *natsTopology) ensureStream(ctx context.Context, js jetstream.JetStream, topic string) (st natsStream, created bool, err error) {
	if st, ok := t.streams.Load(topic); ok {
		return st.(natsStream), false, nil
	}
	name, err := js.StreamNameBySubject(ctx, topic)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		var s jetstream.Stream
		s, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        natsName(topic),
			Description: "entoutbox topic " + topic,
			Subjects:    natsSubjects(topic, t.partitions),
		})
		switch {
		case err == nil:
			name, created = s.CachedInfo().Config.Name, true
		case errors.Is(err, jetstream.ErrStreamNameAlreadyInUse):
			// Made meanwhile by another publisher, or a different stream
			// owns the name; then the lookup fails again and says so.
			name, err = js.StreamNameBySubject(ctx, topic)
		}
	}
	var s jetstream.Stream
	if err == nil {
		s, err = js.Stream(ctx, name)
	}
	if err != nil {
		return natsStream{}, false, fmt.Errorf("provisioning JetStream stream for topic %q: %w", topic, err)
	}
	// The stream says how the topic is split, whoever made it and with
	// whatever ?partitions=: every publisher and member reads the same.
	subjects := s.CachedInfo().Config.Subjects
	st = natsStream{name: name, partitions: natsPartitionsOf(topic, subjects), subjects: subjects}
	t.streams.Store(topic, st)
	return st, created, nil
}

// forget drops what is known of topic, after a failure that may come from
// its stream having been deleted.
func (t *natsTopology) forget(topic string) { t.streams.Delete(topic) }

// ensureConsumer provisions group's durable pull consumer of topic on
// stream and returns its name. An existing one keeps its position and takes
// this URL's ack_wait and max_ack_pending; a new one replaces the group's
// push consumer of an earlier version, if any.
func (t *natsTopology) ensureConsumer(ctx context.Context, js jetstream.JetStream, st natsStream, topic, group string) (string, error) {
	name, err := t.ensurePullConsumer(ctx, js, st, topic, group)
	if err != nil {
		return "", t.consumerFailed(topic, st, name, err)
	}
	return name, nil
}

func (t *natsTopology) ensurePullConsumer(ctx context.Context, js jetstream.JetStream, st natsStream, topic, group string) (string, error) {
	stream := st.name
	name := natsConsumerName(group, topic)
	for attempt := 0; ; attempt++ {
		cons, err := js.Consumer(ctx, stream, name)
		if err == nil {
			cfg := cons.CachedInfo().Config
			if cfg.AckWait != t.ackWait || cfg.MaxAckPending != t.maxAckPending {
				cfg.AckWait, cfg.MaxAckPending = t.ackWait, t.maxAckPending
				if _, err := js.UpdateConsumer(ctx, stream, cfg); err != nil {
					return name, err
				}
			}
			// Also here: a member that made the pull consumer may have
			// stopped before it deleted the push one.
			return name, t.retirePushConsumer(ctx, js, stream, topic, group)
		}
		if !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return name, err
		}
		cfg := jetstream.ConsumerConfig{
			Durable:       name,
			Description:   fmt.Sprintf("entoutbox group %q on topic %q", group, topic),
			DeliverPolicy: jetstream.DeliverAllPolicy,
			FilterSubject: natsWholeFilter(topic, st),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       t.ackWait,
			MaxAckPending: t.maxAckPending,
		}
		push, err := t.pushConsumer(ctx, js, stream, topic, group)
		if err != nil {
			return name, err
		}
		if push != nil && push.AckFloor.Stream > 0 {
			// Where the push consumer left off: every message after its ack
			// floor is delivered again, those acked out of order above it
			// too (once; consumers dedupe them by event id), so that none
			// it had not acked is lost.
			cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
			cfg.OptStartSeq = push.AckFloor.Stream + 1
		}
		if _, err := js.CreateConsumer(ctx, stream, cfg); err != nil {
			if attempt == 0 {
				// Made meanwhile by another member, from the floor it read
				// then (the same or a lower one, read before any push
				// consumer was deleted): join it.
				continue
			}
			return name, err
		}
		if push != nil {
			t.logger.Info("Replaced the group's JetStream push consumer of an earlier version by a pull consumer, "+
				"starting after its last acknowledged message", watermill.LogFields{
				"topic": topic, "group": group, "stream": stream, "push_consumer": push.Name, "pull_consumer": name,
				"start_sequence": cfg.OptStartSeq})
		}
		return name, t.retirePushConsumer(ctx, js, stream, topic, group)
	}
}

// pushConsumer returns the info of group's push consumer of topic made by
// an earlier version, or nil when there is none.
func (t *natsTopology) pushConsumer(ctx context.Context, js jetstream.JetStream, stream, topic, group string) (*jetstream.ConsumerInfo, error) {
	cons, err := js.PushConsumer(ctx, stream, natsPushConsumerName(group, topic))
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrNotPushConsumer):
		return nil, nil
	case err != nil:
		return nil, err
	}
	info := cons.CachedInfo()
	if info.Config.FilterSubject != topic {
		return nil, nil // not ours: another topic's pull consumer may have this name
	}
	return info, nil
}

// retirePushConsumer deletes group's push consumer of topic once the pull
// consumer is there: its members of an earlier version stop receiving.
func (t *natsTopology) retirePushConsumer(ctx context.Context, js jetstream.JetStream, stream, topic, group string) error {
	push, err := t.pushConsumer(ctx, js, stream, topic, group)
	if err != nil || push == nil {
		return err
	}
	if err := js.DeleteConsumer(ctx, stream, push.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("deleting the push consumer %q of an earlier version: %w", push.Name, err)
	}
	return nil
}

// natsPublisher provisions a topic's stream before its first message.
// Publish waits for JetStream's ack of each message, as the module does;
// PublishAsync (see AsyncPublisher) sends with JetStream's async publish
// and one goroutine, confirm, hands each ack to its caller.
type natsPublisher struct {
	*wmnats.Publisher
	js    jetstream.JetStream
	async jetstream.JetStream // with the async publish settings
	topo  *natsTopology
	// acks is the async publishes awaiting JetStream's ack, in the order
	// they were sent; closed ends confirm.
	acks      chan natsPending
	closed    chan struct{}
	closeOnce sync.Once
}

// natsAsyncMaxPending bounds the async publishes awaiting an ack; a relay
// keeps fewer in flight (its Concurrency), so that a publish never stalls.
const natsAsyncMaxPending = 4096

// natsAsyncTimeout is how long an async publish waits for its ack before
// it fails, as long as a Publish waits (nats.go's default request timeout).
const natsAsyncTimeout = 5 * time.Second

type natsPending struct {
	fut       jetstream.PubAckFuture
	topic     string
	uuid      string // the message's
	publishID bool   // whether it has events.MetaPublishID
	done      func(error)
}

// PublishAsync implements AsyncPublisher.
func (p *natsPublisher) PublishAsync(topic string, msg *message.Message, done func(error)) {
	ctx, cancel := context.WithTimeout(context.Background(), natsProvisionTimeout)
	st, _, err := p.topo.ensureStream(ctx, p.js, topic) // a map read once known
	cancel()
	if err != nil {
		done(err)
		return
	}
	nm, err := natsMarshaler{}.Marshal(natsPublishSubject(topic, st, msg), msg)
	if err != nil {
		done(err)
		return
	}
	fut, err := p.async.PublishMsgAsync(nm)
	if err != nil {
		p.topo.forget(topic)
		done(err)
		return
	}
	select {
	case p.acks <- natsPending{fut: fut, topic: topic, uuid: msg.UUID,
		publishID: msg.Metadata.Get(events.MetaPublishID) != "", done: done}:
	case <-p.closed:
		done(errors.New("publisher closed"))
	}
}

// confirm waits for the acks of the async publishes in the order they
// were sent (JetStream answers in that order) and tells each caller.
func (p *natsPublisher) confirm() {
	for {
		var pa natsPending
		select {
		case pa = <-p.acks:
		case <-p.closed:
			return
		}
		select {
		case ack := <-pa.fut.Ok():
			pa.done(checkDuplicate(pa.topic, pa.uuid, pa.publishID, ack))
		case err := <-pa.fut.Err():
			p.topo.forget(pa.topic) // its stream may have been deleted
			pa.done(err)
		case <-p.closed:
			pa.done(errors.New("publisher closed before JetStream acknowledged the message"))
			return
		}
	}
}

// Close fails the async publishes still awaiting an ack, then closes the
// module's publisher.
func (p *natsPublisher) Close() error {
	p.closeOnce.Do(func() { close(p.closed) })
	for {
		select {
		case pa := <-p.acks:
			pa.done(errors.New("publisher closed before JetStream acknowledged the message"))
		default:
			return p.Publisher.Close()
		}
	}
}

// Publish sends the messages one at a time, each once JetStream acked the
// one before, as the module's publisher does, and reads each ack: a message
// JetStream dropped as a duplicate may not have been stored (see
// checkDuplicate).
func (p *natsPublisher) Publish(topic string, messages ...*message.Message) error {
	ctx, cancel := context.WithTimeout(context.Background(), natsProvisionTimeout)
	defer cancel()
	st, _, err := p.topo.ensureStream(ctx, p.js, topic)
	if err != nil {
		return err
	}
	for _, msg := range messages {
		nm, err := natsMarshaler{}.Marshal(natsPublishSubject(topic, st, msg), msg)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), natsAsyncTimeout)
		ack, err := p.js.PublishMsg(ctx, nm)
		cancel()
		if err != nil {
			p.topo.forget(topic)
			return fmt.Errorf("sending message %s: %w", msg.UUID, err)
		}
		if err := checkDuplicate(topic, msg.UUID, msg.Metadata.Get(events.MetaPublishID) != "", ack); err != nil {
			return err
		}
	}
	return nil
}

// DuplicateError is a publish that JetStream acknowledged as a duplicate
// without storing it: a message with the same Nats-Msg-Id was stored
// within the stream's duplicate window (2 minutes by default), at
// Sequence. Subscribers that handled that one do not get this one.
type DuplicateError struct {
	Topic    string
	UUID     string // the message's, and its Nats-Msg-Id
	Sequence uint64 // the stored message's
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("JetStream did not store message %s on %q: it dropped it as a duplicate of stream sequence %d "+
		"with the same Nats-Msg-Id, within the stream's duplicate window; give it its own %s to have it stored",
		e.UUID, e.Topic, e.Sequence, events.MetaPublishID)
}

// checkDuplicate tells whether a publish JetStream acked as a duplicate
// was delivered. A message carrying events.MetaPublishID (everything the
// relay and a replay send) has an id of its own per outbox row or replay:
// its duplicate is that very publish stored before, the relay sending a
// row again after a crash, and it is delivered. Any other message is
// known to JetStream by its UUID alone: what was stored under it may be
// an earlier message with the same UUID that subscribers already handled,
// so this one is not delivered and the caller is told (*DuplicateError).
func checkDuplicate(topic, uuid string, publishID bool, ack *jetstream.PubAck) error {
	if ack == nil || !ack.Duplicate || publishID {
		return nil
	}
	return &DuplicateError{Topic: topic, UUID: uuid, Sequence: ack.Sequence}
}

// natsMarshaler is the module's NATSMarshaler plus the Nats-Msg-Id header.
// It refuses metadata a NATS header cannot carry unchanged rather than let
// nats.go alter it in transit (it trims values and turns line breaks into
// spaces).
type natsMarshaler struct{}

func (natsMarshaler) Marshal(topic string, msg *message.Message) (*nats.Msg, error) {
	// What the module's NATSMarshaler writes (the UUID header, then one
	// header per metadata key), built in one pass.
	header := make(nats.Header, len(msg.Metadata)+2)
	header.Set(wmnats.WatermillUUIDHdr, msg.UUID)
	for k, v := range msg.Metadata {
		if err := checkNATSHeader(k, v); err != nil {
			return nil, fmt.Errorf("message %s: %w", msg.UUID, err)
		}
		header.Set(k, v)
	}
	// JetStream drops a message whose id it stored within the duplicate
	// window: one id per publish where the message has one, so that a
	// retried or replayed event is stored again (see events.MetaPublishID).
	if id := msg.Metadata.Get(events.MetaPublishID); id != "" {
		header.Set(nats.MsgIdHdr, id)
	} else if msg.UUID != "" {
		header.Set(nats.MsgIdHdr, msg.UUID)
	}
	return &nats.Msg{Subject: topic, Data: msg.Payload, Header: header}, nil
}

// Unmarshal reads what NATSMarshaler writes, and never fails: a message
// the subscriber cannot read never reaches a handler that could dead-letter
// it, and comes back for ever. A header key with several values
// (which the module refuses) keeps its first one, and the message carries
// why in metaMalformed, so that the consumer dead-letters it with that
// reason.
func (natsMarshaler) Unmarshal(nm *nats.Msg) (*message.Message, error) {
	// Sized for the metadata headers (all but the UUID and Nats-Msg-Id)
	// and the delivery count the subscriber adds: up to 8 entries is a
	// map of one group, which a larger hint would make a table.
	md := make(message.Metadata, max(len(nm.Header)-1, 0))
	var repeated []string
	for k, v := range nm.Header {
		if len(v) > 1 && k != nats.MsgIdHdr {
			repeated = append(repeated, fmt.Sprintf("%q %d times (values %q)", k, len(v), v))
		}
		switch k {
		case wmnats.WatermillUUIDHdr, nats.MsgIdHdr, nats.ExpectedLastMsgIdHdr, nats.ExpectedStreamHdr,
			nats.ExpectedLastSubjSeqHdr, nats.ExpectedLastSeqHdr:
			continue
		}
		if len(v) > 0 {
			md.Set(k, v[0])
		}
	}
	if len(repeated) > 0 {
		slices.Sort(repeated)
		md.Set(metaMalformed, "NATS header repeated, one value per key expected: "+strings.Join(repeated, ", ")+
			"; the first value of each is kept")
	}
	ids := nm.Header.Values(wmnats.WatermillUUIDHdr)
	var id string
	if len(ids) > 0 {
		id = ids[0]
	}
	msg := message.NewMessage(id, nm.Data)
	msg.Metadata = md
	return msg, nil
}

// metaMalformed is consumer.MetaMalformed (a test checks they agree): the
// broker does not import the consumer run time.
const metaMalformed = "outbox_malformed"

// checkNATSHeader accepts what survives a NATS header both ways: a key of
// printable ASCII without the characters nats.go rejects, not one of the
// headers NATS or the marshaler own, and a value without line breaks or
// surrounding white space.
func checkNATSHeader(k, v string) error {
	if k == "" {
		return errors.New("metadata key is empty")
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < '!' || c > '~' || strings.IndexByte(`"()/,:;<=>?@[\]{}`, c) >= 0 {
			return fmt.Errorf("metadata key %q cannot be a NATS header (character %q)", k, c)
		}
	}
	if strings.HasPrefix(k, "Nats-") || k == wmnats.WatermillUUIDHdr {
		return fmt.Errorf("metadata key %q is reserved by NATS or Watermill", k)
	}
	if strings.ContainsAny(v, "\r\n") || textproto.TrimString(v) != v {
		return fmt.Errorf("metadata %q: value %q cannot be a NATS header value (line break or surrounding space)", k, v)
	}
	return nil
}

// natsNameMax keeps names well under JetStream's 255-byte limit.
const natsNameMax = 200

// natsName turns s into a valid JetStream stream or consumer name (and a
// subject token). Characters other than ASCII letters, digits, "-" and "_"
// become "_"; then, and when s is too long, a hash of s is appended so that
// two different inputs keep different names.
func natsName(s string) string {
	var b strings.Builder
	changed := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
			changed = true
		}
	}
	name := b.String()
	if len(name) > natsNameMax {
		name = name[:natsNameMax]
		changed = true
	}
	if changed || name == "" {
		h := fnv.New32a()
		_, _ = h.Write([]byte(s))
		name = fmt.Sprintf("%s_%08x", name, h.Sum32())
	}
	return name
}
