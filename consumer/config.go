package consumer

import (
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/trace"

	"github.com/entoutbox/entoutbox/internal/backoff"
	"github.com/entoutbox/entoutbox/metrics"
)

// Config tunes a handler set. Build it with Options.
type Config struct {
	// MaxAttempts bounds the tries of one delivery before it goes to the
	// dead letters; 5 when zero.
	MaxAttempts int
	// InitialBackoff is the wait after the first failure; it doubles after
	// each further failure up to MaxBackoff. 100 ms and 5 s when zero.
	InitialBackoff, MaxBackoff time.Duration
	// TopicPrefix is prepended to every topic subscribed to; it must match
	// the relay's --topic-prefix, or the consumer reads topics no one
	// publishes on and receives nothing (on NATS the subscriber then logs
	// that it created the topic's stream).
	TopicPrefix string
	// DeadLetterPublisher and DeadLetterTopic, when set, also publish each
	// dead letter to a broker topic, next to the dead-letter table.
	DeadLetterPublisher message.Publisher
	DeadLetterTopic     string
	// Logger receives the retries (info) and dead letters (error,
	// DeadLetteredLog); slog.Default() (through watermill.NewSlogLogger)
	// when nil. WithLogger(watermill.NopLogger{}) silences it.
	Logger watermill.LoggerAdapter
	// Metrics, when set, receives the deliveries' metrics (see the metrics
	// package); nil turns them off.
	Metrics *metrics.Metrics
	// Concurrency is how many messages one instance handles at once per
	// consumer name and topic: AddToRouter subscribes that many members of
	// the consumer's group. 8 when zero. The ordering check keeps each
	// aggregate's effects in order whatever it is; without positions in
	// the schema it is 1, as before.
	Concurrency int
	// PassOverDeadLetters moves an aggregate's position past an event of
	// it that goes to the dead letters, so that the ones after it are
	// applied; by default the aggregate is held instead: its later events
	// go to the dead letters too ("held: ..."), until the held one is
	// retried and applied (or discarded).
	PassOverDeadLetters bool
	// GapWait bounds how long one delivery of an event waits, in the
	// handler set, for its aggregate's previous event (which another
	// instance may be handling); then the message is nacked, for the
	// broker to deliver again. 5 s when zero.
	GapWait time.Duration
	// MaxGap is how long an aggregate waits for a missing event before the
	// consumer stops waiting: the waiting event goes to the dead letters
	// and the aggregate is held at the missing one (which a relay dead
	// letter never published, say: retrying it repairs the aggregate).
	// 5 min when zero.
	MaxGap time.Duration
	// StartAfter is how long the events of an aggregate the consumer has
	// applied nothing of wait for its earlier ones before the consumer
	// starts the aggregate at the lowest that waited (logged at info):
	// a consumer whose subscription began after the aggregate's first
	// events never gets those. Longer than any broker's redelivery of a
	// dead instance's messages (NATS ack_wait, Redis's claim after 60 s),
	// or a first event in flight there would be skipped. 2 min when zero;
	// negative never starts late (MaxGap holds the aggregate instead).
	StartAfter time.Duration
	// TracerProvider starts a consumer span "process <topic>" around each
	// delivery, a child of the relay's send span whose context the message
	// carries (otel.GetTextMapPropagator()). The global provider when nil,
	// which traces nothing until the application sets one.
	TracerProvider trace.TracerProvider
}

// Option changes a Config.
type Option func(*Config)

// WithMaxAttempts bounds the tries of one delivery.
func WithMaxAttempts(n int) Option { return func(c *Config) { c.MaxAttempts = n } }

// WithBackoff sets the first wait after a failure and the longest one.
func WithBackoff(initial, max time.Duration) Option {
	return func(c *Config) { c.InitialBackoff, c.MaxBackoff = initial, max }
}

// WithTopicPrefix prepends prefix to every subscribed topic: the relay's
// --topic-prefix.
func WithTopicPrefix(prefix string) Option { return func(c *Config) { c.TopicPrefix = prefix } }

// WithDeadLetterTopic also publishes dead letters to topic with pub.
func WithDeadLetterTopic(pub message.Publisher, topic string) Option {
	return func(c *Config) { c.DeadLetterPublisher, c.DeadLetterTopic = pub, topic }
}

// WithLogger logs through l instead of slog.Default();
// watermill.NopLogger{} silences the handler set.
func WithLogger(l watermill.LoggerAdapter) Option { return func(c *Config) { c.Logger = l } }

// WithConcurrency sets how many messages one instance handles at once per
// consumer name and topic (Config.Concurrency).
func WithConcurrency(n int) Option { return func(c *Config) { c.Concurrency = n } }

// WithPassOverDeadLetters moves an aggregate past its events that go to
// the dead letters instead of holding it (Config.PassOverDeadLetters).
func WithPassOverDeadLetters() Option { return func(c *Config) { c.PassOverDeadLetters = true } }

// WithGapWait bounds one delivery's wait for its aggregate's previous
// event (Config.GapWait).
func WithGapWait(d time.Duration) Option { return func(c *Config) { c.GapWait = d } }

// WithMaxGap sets how long an aggregate waits for a missing event before
// it is held (Config.MaxGap).
func WithMaxGap(d time.Duration) Option { return func(c *Config) { c.MaxGap = d } }

// WithStartAfter sets how long a consumer waits for the first events of an
// aggregate new to it before starting it later (Config.StartAfter).
func WithStartAfter(d time.Duration) Option { return func(c *Config) { c.StartAfter = d } }

// WithMetrics reports the deliveries in m.
func WithMetrics(m *metrics.Metrics) Option { return func(c *Config) { c.Metrics = m } }

// WithTracerProvider traces the deliveries with tp instead of the global
// provider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *Config) { c.TracerProvider = tp }
}

func newConfig(opts []Option) Config {
	var c Config
	for _, opt := range opts {
		opt(&c)
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 5
	}
	if c.InitialBackoff <= 0 {
		c.InitialBackoff = 100 * time.Millisecond
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 5 * time.Second
	}
	if c.MaxBackoff < c.InitialBackoff {
		c.MaxBackoff = c.InitialBackoff
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 8
	}
	if c.GapWait <= 0 {
		c.GapWait = 5 * time.Second
	}
	if c.MaxGap <= 0 {
		c.MaxGap = 5 * time.Minute
	}
	if c.StartAfter == 0 {
		c.StartAfter = 2 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = watermill.NewSlogLogger(slog.Default())
	}
	return c
}

// backoff is the wait after the given failed attempt (1-based).
func (c Config) backoff(attempt int) time.Duration {
	return backoff.Exponential(c.InitialBackoff, c.MaxBackoff, attempt)
}
