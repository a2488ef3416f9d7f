package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/entoutbox/entoutbox/events"
)

// The NATS subscriber: each Subscribe pulls the group's messages of one
// topic from the group's durable pull consumer, only as many as it has
// room for (max_in_flight, less those it holds), so that a message waits
// on the server, not in the process, and its ack wait starts when a member
// takes it. It hands each one out without waiting for the previous ones'
// acks, and while it holds one (handed out or not, not yet acked or
// nacked) it tells the server every ack_wait / 2 that the message is in
// progress: however long a handler takes, a message comes again only when
// it is nacked, its member's subscriber closes (at once: it naks what it
// holds) or its member is gone (after ack_wait).
//
// It speaks JetStream's pull protocol on an inbox of its own rather than
// through nats.go's jetstream Fetch or Messages: Messages pulls ahead of
// the free slots, and a Fetch can only be given up by cancelling it, which
// drops what the server already sent, to come again after ack_wait only.
// Here one pull request is open at a time, and closing drains the inbox:
// what the server sent before it took the unsubscription in is naked,
// not dropped.
//
// What a message costs is kept small, for consumers that drain a backlog
// at thousands a second: a goroutine of its own only waits for its ack or
// nack. One goroutine per subscriber (tend) sends the acks and naks, in
// batches, and every ack_wait / 2 tells the server that all the held
// messages are in progress. Acks are sent without waiting for the
// server's answer (an AckSync is a round trip and a goroutine blocked per
// message): another goroutine (confirmAcks) flushes the connection after
// them, each flush covering the acks sent before it, and logs those the
// server may not have received; they come again, as an AckSync that
// failed would have said.

// natsMaxInFlight is how many messages a subscription holds at most,
// unless the URL sets ?max_in_flight=: enough to fill a consumer's
// batches, and seven instances of a consumer name under max_ack_pending
// (1,000).
const natsMaxInFlight = 128

const (
	// natsPullExpires is how long a pull request waits on the server for
	// messages; then another is sent.
	natsPullExpires = 30 * time.Second
	// natsPullHeartbeat is how often the server says a pull request it
	// has nothing for is still open; two missed and it is taken as lost
	// (a reconnection), and another is sent.
	natsPullHeartbeat = 5 * time.Second
	// natsPullTick is how often a subscription checks for a lost pull
	// request and for the end of a pause after a failed one.
	natsPullTick = time.Second
	// natsPullRetryMax bounds the pause after failed pull requests,
	// which doubles from natsPullRetryMin.
	natsPullRetryMin = 100 * time.Millisecond
	natsPullRetryMax = 5 * time.Second
	// natsCloseWait is how long Close lets the handlers of the messages
	// handed out ack or nack them, their contexts cancelled; then it naks
	// the rest, for the group's other members.
	natsCloseWait = 10 * time.Second
)

// natsSubscriber is a group's member: the Subscriber a Broker returns for a
// nats:// URL. It has a connection of its own.
type natsSubscriber struct {
	nc          *nats.Conn
	js          jetstream.JetStream
	topo        *natsTopology
	group       string
	maxInFlight int
	closeWait   time.Duration // natsCloseWait
	confirmWait time.Duration // natsConfirmWait
	logger      watermill.LoggerAdapter
	// reconnects counts the connection's reconnections: the server forgets
	// the open pull requests of a connection it lost.
	reconnects atomic.Int64

	heldMu sync.Mutex
	// holding is the messages tend tells in progress: those received and
	// not yet acked or nacked, by their delivery.
	holding map[*nats.Msg]struct{}
	// settling is the acks and naks for tend to send; toSettle says there
	// are some.
	settling []natsSettling
	toSettle chan struct{}
	// unconfirmed is the UUIDs of the messages acked since the last
	// flush; acksSent says there are some.
	unconfirmed []string
	acksSent    chan struct{}
	// settled is closed once every message is acked or nacked (Close);
	// then tend and confirmAcks end.
	settled chan struct{}
	tending sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	closing   chan struct{}
	closeOnce sync.Once
	closeErr  error
	pulls     sync.WaitGroup // natsPull.run
	held      sync.WaitGroup // messages received and not yet acked or nacked
}

func newNATSSubscriber(raw, group string, topo *natsTopology, maxInFlight int, logger watermill.LoggerAdapter) (*natsSubscriber, error) {
	s := &natsSubscriber{topo: topo, group: group, maxInFlight: maxInFlight, logger: logger,
		closeWait: natsCloseWait, confirmWait: natsConfirmWait, closing: make(chan struct{}),
		holding: map[*nats.Msg]struct{}{}, toSettle: make(chan struct{}, 1), acksSent: make(chan struct{}, 1),
		settled: make(chan struct{})}
	opts := append(natsOptions(), nats.ReconnectHandler(func(*nats.Conn) { s.reconnects.Add(1) }))
	nc, err := nats.Connect(raw, opts...)
	if err != nil {
		return nil, fmt.Errorf("connecting: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("opening JetStream: %w", err)
	}
	s.nc, s.js = nc, js
	s.tending.Add(2)
	go s.tend()
	go s.confirmAcks()
	return s, nil
}

// MaxInFlight implements ConcurrentSubscriber.
func (s *natsSubscriber) MaxInFlight() int { return s.maxInFlight }

// LimitInFlight lowers max_in_flight for the subscriptions made after it.
func (s *natsSubscriber) LimitInFlight(n int) { s.maxInFlight = max(min(n, s.maxInFlight), 1) }

func (s *natsSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	pctx, cancel := context.WithTimeout(ctx, natsProvisionTimeout)
	defer cancel()
	st, created, err := s.topo.ensureStream(pctx, s.js, topic)
	if err != nil {
		return nil, err
	}
	if created {
		// Said once: the stream is there for every later subscriber. A
		// consumer whose topic prefix differs from the relay's would
		// otherwise wait for ever without a word.
		s.logger.Info("No producer has published on this topic yet: its JetStream stream was created by this subscriber. "+
			"If a relay is running, check that its --topic-prefix matches the consumers' consumer.WithTopicPrefix",
			watermill.LogFields{"topic": topic, "stream": st.name, "group": s.group})
	}
	durable, err := s.topo.ensureConsumer(pctx, s.js, st, topic, s.group)
	if err != nil {
		return nil, err
	}
	return s.pull(ctx, topic, st.name, durable)
}

// pull starts pulling the messages of durable, a consumer of topic on
// stream.
func (s *natsSubscriber) pull(ctx context.Context, topic, stream, durable string) (<-chan *message.Message, error) {
	msgCtx, cancelMsgs := context.WithCancel(ctx)
	p := &natsPull{
		sub:        s,
		ctx:        ctx,
		msgCtx:     msgCtx,
		cancelMsgs: cancelMsgs,
		next:       fmt.Sprintf("$JS.API.CONSUMER.MSG.NEXT.%s.%s", stream, durable),
		incoming:   make(chan *nats.Msg),
		stopped:    make(chan struct{}),
		output:     make(chan *message.Message),
		freed:      make(chan struct{}, 1),
		log:        watermill.LogFields{"topic": topic, "group": s.group, "consumer": durable},
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		cancelMsgs()
		return nil, errors.New("subscriber closed")
	}
	var err error
	if p.inbox, err = s.nc.Subscribe(s.nc.NewInbox(), p.receive); err != nil {
		cancelMsgs()
		return nil, fmt.Errorf("subscribing to an inbox: %w", err)
	}
	s.pulls.Add(1)
	go p.run()
	return p.output, nil
}

// Close stops pulling, naks what was received and not handed out, cancels
// the contexts of the messages handed out (as Watermill subscribers do)
// and waits up to closeWait for their handlers to ack or nack them,
// then naks the rest: all of them go to the group's other members at
// once, not after ack_wait. Then it closes the connection.
func (s *natsSubscriber) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.closing)
		s.mu.Unlock()
		s.pulls.Wait()
		s.held.Wait()
		close(s.settled)
		s.tending.Wait()
		s.closeErr = s.nc.FlushTimeout(natsProvisionTimeout) // the last naks
		s.nc.Close()
	})
	return s.closeErr
}

// natsPull is one Subscribe: run pulls, receives and hands out; hold
// settles one message.
type natsPull struct {
	sub  *natsSubscriber
	ctx  context.Context // Subscribe's: its end ends the subscription
	next string          // the consumer's "next messages" API subject
	log  watermill.LogFields
	// msgCtx is the context of every message handed out, cancelled when
	// the subscription ends (as Watermill subscribers do): one for all,
	// not one each.
	msgCtx     context.Context
	cancelMsgs context.CancelFunc

	inbox *nats.Subscription
	// incoming takes what the inbox receives to run. Unbuffered, so that
	// once stopped is closed nothing is left in it (see receive).
	incoming chan *nats.Msg
	stopped  chan struct{}
	output   chan *message.Message
	held     atomic.Int64  // messages received and not yet acked or nacked
	freed    chan struct{} // signalled when held drops
}

// natsPullRequest is JetStream's request for the next messages.
type natsPullRequest struct {
	Batch     int           `json:"batch"`
	Expires   time.Duration `json:"expires"`
	Heartbeat time.Duration `json:"idle_heartbeat"`
}

// run pulls with one request at a time, for as many messages as there are
// free slots, and hands the messages out in the order received.
func (p *natsPull) run() {
	defer p.sub.pulls.Done()
	defer close(p.output)
	defer p.cancelMsgs()
	var (
		queue      []*message.Message // received, not yet taken from output
		open       bool               // a pull request is outstanding
		due        int                // how many messages it may still deliver
		heard      time.Time          // its last message or heartbeat
		retryAt    time.Time          // no request before, after a failed one
		retry      time.Duration
		reconnects = p.sub.reconnects.Load()
	)
	tick := time.NewTicker(natsPullTick)
	defer tick.Stop()
	for {
		if free := p.sub.maxInFlight - int(p.held.Load()); !open && free > 0 && !time.Now().Before(retryAt) {
			if err := p.request(free); err != nil {
				retry = p.failed(retry, "", err.Error())
				retryAt = time.Now().Add(retry)
			} else {
				open, due, heard = true, free, time.Now()
			}
		}
		var out chan<- *message.Message
		var first *message.Message
		if len(queue) > 0 {
			out, first = p.output, queue[0]
		}
		select {
		case out <- first:
			queue[0] = nil
			queue = queue[1:]
		case nm := <-p.incoming:
			heard = time.Now()
			if status, description, ok := natsStatus(nm); ok {
				switch status {
				case "100": // idle heartbeat: the request is still open
				case "404", "408": // nothing more for this request
					open, retry = false, 0
				default: // the request ended otherwise: 409 and the like
					open = false
					retry = p.failed(retry, status, description)
					retryAt = time.Now().Add(retry)
				}
				continue
			}
			if open {
				if due--; due == 0 {
					open = false
				}
			}
			retry = 0
			if m := p.accept(nm); m != nil {
				queue = append(queue, m)
			}
		case <-p.freed:
		case <-tick.C:
			if n := p.sub.reconnects.Load(); n != reconnects || open && time.Since(heard) > 2*natsPullHeartbeat {
				// The request is lost; a lost one still delivering has
				// its extra messages naked by accept.
				reconnects, open = n, false
			}
		case <-p.ctx.Done():
			p.stop(queue)
			return
		case <-p.sub.closing:
			p.cancelMsgs() // before stop, which may take a while
			p.stop(queue)
			return
		}
	}
}

func (p *natsPull) request(n int) error {
	body, err := json.Marshal(natsPullRequest{Batch: n, Expires: natsPullExpires, Heartbeat: natsPullHeartbeat})
	if err != nil {
		return err
	}
	return p.sub.nc.PublishRequest(p.next, p.inbox.Subject, body)
}

// failed logs a pull request that failed and returns the pause before the
// next one, doubled from the last.
func (p *natsPull) failed(last time.Duration, status, description string) time.Duration {
	switch description {
	case "Leadership Change", "Server Shutdown":
		return 0 // asked again at once, of whichever server answers
	}
	p.sub.logger.Error("JetStream refused a pull request; asking again", errors.New(description),
		p.log.Add(watermill.LogFields{"status": status}))
	return min(max(2*last, natsPullRetryMin), natsPullRetryMax)
}

// natsStatus tells a status message of the pull protocol (heartbeat, end
// of request, error) from a message of the stream, which has a reply
// subject to ack it on (and may have a Status header of its own).
func natsStatus(nm *nats.Msg) (status, description string, ok bool) {
	if nm.Reply != "" || len(nm.Data) > 0 || nm.Header == nil {
		return "", "", false
	}
	status = nm.Header.Get("Status")
	return status, nm.Header.Get("Description"), status != ""
}

// accept takes a message of the stream in, to be handed out, or naks it
// when every slot is taken (a lost pull request still delivering).
func (p *natsPull) accept(nm *nats.Msg) *message.Message {
	if nm.Reply == "" {
		return nil // not a JetStream delivery: nothing to ack
	}
	if int(p.held.Load()) >= p.sub.maxInFlight {
		p.nak(nm)
		return nil
	}
	msg, err := natsMarshaler{}.Unmarshal(nm)
	if err != nil { // it does not fail, but if it did: another member may read it
		p.sub.logger.Error("Cannot read a NATS message", err, p.log)
		p.nak(nm)
		return nil
	}
	if n, ok := natsDeliveryCount(nm.Reply); ok {
		msg.Metadata.Set(events.MetaDeliveryCount, n)
	}
	msg.SetContext(p.msgCtx)
	p.held.Add(1)
	p.sub.held.Add(1)
	p.sub.heldMu.Lock()
	p.sub.holding[nm] = struct{}{}
	p.sub.heldMu.Unlock()
	go p.hold(nm, msg)
	return msg
}

// hold waits for msg's ack or nack and hands it to tend to send; it
// stays small, one per message held.
func (p *natsPull) hold(nm *nats.Msg, msg *message.Message) {
	closing := p.sub.closing
	var giveUp <-chan time.Time
	for {
		select {
		case <-msg.Acked():
			p.sub.settle(natsSettling{pull: p, nm: nm, uuid: msg.UUID, ack: true})
			return
		case <-msg.Nacked():
			// At once, unless the handler asked for a delay
			// (events.MetaNackDelay): the server then keeps the message
			// back that long, and delivers others meanwhile. A nack at
			// Close is for another member to take the message now.
			st := natsSettling{pull: p, nm: nm, uuid: msg.UUID}
			if closing != nil {
				st.delay, _ = time.ParseDuration(msg.Metadata.Get(events.MetaNackDelay))
			}
			p.sub.settle(st)
			return
		case <-closing: // run cancels msgCtx
			closing = nil
			giveUp = time.After(p.sub.closeWait)
		case <-giveUp:
			p.sub.settle(natsSettling{pull: p, nm: nm, uuid: msg.UUID})
			return
		}
	}
}

// JetStream's answers to a message it delivered.
var (
	natsAck        = []byte("+ACK")
	natsNak        = []byte("-NAK")
	natsInProgress = []byte("+WPI")
)

// natsNakDelay is a NAK that has the server deliver the message again
// after d, not at once (JetStream's {"delay": nanoseconds}).
func natsNakDelay(d time.Duration) []byte {
	return fmt.Appendf(nil, `-NAK {"delay": %d}`, d.Nanoseconds())
}

// natsSettling is a held message's ack or nak, for tend to send.
type natsSettling struct {
	pull *natsPull
	nm   *nats.Msg
	uuid string
	ack  bool // else a nak
	// delay is how long the server keeps a nacked message back before
	// it delivers it again; 0: at once.
	delay time.Duration
}

func (s *natsSubscriber) settle(st natsSettling) {
	s.heldMu.Lock()
	s.settling = append(s.settling, st)
	s.heldMu.Unlock()
	select {
	case s.toSettle <- struct{}{}:
	default:
	}
}

// tend sends the acks and naks of the held messages as handlers make
// them, and every ack_wait / 2 tells the server the others are in
// progress, until Close. No in-progress follows an ack or nak: the
// message leaves holding first.
func (s *natsSubscriber) tend() {
	defer s.tending.Done()
	progress := time.NewTicker(max(s.topo.ackWait/2, time.Millisecond))
	defer progress.Stop()
	var batch []natsSettling
	var acked []string
	for {
		select {
		case <-s.toSettle:
			s.heldMu.Lock()
			batch, s.settling = s.settling, batch[:0]
			for _, st := range batch {
				delete(s.holding, st.nm)
			}
			s.heldMu.Unlock()
			acked = acked[:0]
			for _, st := range batch {
				if s.send(st) && st.ack {
					acked = append(acked, st.uuid)
				}
				st.pull.release()
			}
			clear(batch) // let the messages go
			if len(acked) > 0 {
				s.heldMu.Lock()
				s.unconfirmed = append(s.unconfirmed, acked...)
				s.heldMu.Unlock()
				select {
				case s.acksSent <- struct{}{}:
				default:
				}
			}
		case <-progress.C:
			s.heldMu.Lock()
			var err error
			for nm := range s.holding {
				if err = s.nc.Publish(nm.Reply, natsInProgress); err != nil {
					break // the connection is closed: the next tick tries again
				}
			}
			s.heldMu.Unlock()
			if err != nil {
				s.logger.Debug("Cannot say NATS messages are in progress", watermill.LogFields{"error": err.Error()})
			}
		case <-s.settled:
			return
		}
	}
}

// send sends an ack or nak and says whether it went out.
func (s *natsSubscriber) send(st natsSettling) bool {
	body := natsNak
	switch {
	case st.ack:
		body = natsAck
	case st.delay > 0:
		body = natsNakDelay(st.delay)
	}
	err := s.nc.Publish(st.nm.Reply, body)
	switch {
	case err == nil:
		return true
	case st.ack:
		s.logger.Error("Cannot ack a NATS message; it will come again", err,
			st.pull.log.Add(watermill.LogFields{"message_uuid": st.uuid}))
	default:
		s.logger.Error("Cannot nack a NATS message; it will come again after ack_wait", err,
			st.pull.log.Add(watermill.LogFields{"message_uuid": st.uuid}))
	}
	return false
}

// nak naks a message that is not held.
func (p *natsPull) nak(nm *nats.Msg) {
	if err := p.sub.nc.Publish(nm.Reply, natsNak); err != nil {
		p.sub.logger.Error("Cannot nack a NATS message; it will come again after ack_wait", err, p.log)
	}
}

const (
	// natsConfirmWait bounds the wait for the server's word that it
	// received the acks sent before: as long as an AckSync waits.
	natsConfirmWait = 5 * time.Second
	// natsConfirmEvery spaces the flushes that confirm acks: each is a
	// round trip, and more acks gather meanwhile.
	natsConfirmEvery = 50 * time.Millisecond
)

// confirmAcks flushes the connection after acks were sent, until Close
// (then once more), and logs the acks the server may not have received.
func (s *natsSubscriber) confirmAcks() {
	defer s.tending.Done()
	var confirming []string
	for {
		done := false
		select {
		case <-s.acksSent:
		case <-s.settled:
			done = true
		}
		s.heldMu.Lock()
		confirming, s.unconfirmed = s.unconfirmed, confirming[:0]
		s.heldMu.Unlock()
		if len(confirming) > 0 {
			if err := s.nc.FlushTimeout(s.confirmWait); err != nil {
				s.logger.Error("Cannot make sure the NATS server received acks; their messages may come again", err,
					watermill.LogFields{"group": s.group, "messages": len(confirming),
						"message_uuids": strings.Join(confirming[:min(len(confirming), 10)], ",")})
			}
		}
		if done {
			return
		}
		select {
		case <-time.After(natsConfirmEvery):
		case <-s.settled:
		}
	}
}

func (p *natsPull) release() {
	p.held.Add(-1)
	p.sub.held.Done()
	select {
	case p.freed <- struct{}{}:
	default:
	}
}

// receive is the inbox's handler.
func (p *natsPull) receive(nm *nats.Msg) {
	select {
	case p.incoming <- nm:
	case <-p.stopped: // only after a drain that did not finish
		if nm.Reply != "" { // a message of the stream
			p.nak(nm)
		}
	}
}

// stop ends the subscription: the messages received and not handed out
// are nacked, and the inbox drained, so that what the server sent before
// it took the unsubscription in is naked too rather than left to its ack
// wait.
func (p *natsPull) stop(queue []*message.Message) {
	defer close(p.stopped)
	for _, m := range queue {
		m.Nack() // hold naks it
	}
	closed := p.inbox.StatusChanged(nats.SubscriptionClosed)
	if err := p.inbox.Drain(); err != nil {
		_ = p.inbox.Unsubscribe()
		return
	}
	timeout := time.NewTimer(natsProvisionTimeout)
	defer timeout.Stop()
	for {
		select {
		case nm := <-p.incoming:
			if nm.Reply != "" { // a message of the stream
				p.nak(nm)
			}
		case <-closed:
			return
		case <-timeout.C:
			_ = p.inbox.Unsubscribe()
			return
		}
	}
}

// natsDeliveryCount reads how many times a message was delivered off the
// subject its ack goes to, as nats.go's Msg.Metadata does, without
// parsing the rest:
//
//	$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>
//	$JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>[.<token>]
func natsDeliveryCount(reply string) (string, bool) {
	rest, ok := strings.CutPrefix(reply, "$JS.ACK.")
	if !ok {
		return "", false
	}
	skip := 2 // the tokens before <delivered>
	switch n := strings.Count(rest, ".") + 1; {
	case n == 7:
	case n >= 9:
		skip = 4
	default:
		return "", false
	}
	for range skip {
		rest = rest[strings.IndexByte(rest, '.')+1:]
	}
	count := rest[:strings.IndexByte(rest, '.')]
	if count == "" || strings.Trim(count, "0123456789") != "" {
		return "", false
	}
	return count, true
}
