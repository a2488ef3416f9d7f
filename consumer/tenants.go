package consumer

// Tenants: a service with a database (or schema) per tenant applies each
// event in its tenant's database. The relay puts the tenant on every
// message (events.MetaTenant); a handler set made for tenants reads it,
// opens the tenant's database through the application's opener, and
// hands the delivery to a handler set of that database: the dedupe
// record, the aggregate's position, the effect and the dead letters are
// all the tenant's. Each tenant's set is a whole handler set (its own
// turns, batches and outage breaker), so one tenant's database down
// pauses that tenant alone.
//
// What belongs to no tenant stays in the set's own database, the
// fallback: the dead letters of messages that name no tenant, or one the
// opener does not know, and the membership of the instances reading by
// partition.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"entgo.io/ent/dialect"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/entoutbox/entoutbox/consumer/internal/letters"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/metrics"
)

// ErrUnknownTenant is what an application's tenant opener wraps when the
// tenant a message names is not one of its tenants: the message can never
// be applied, and goes to the fallback database's dead letters. Any other
// error of the opener (the tenant's database is down) nacks the delivery,
// for the broker to deliver it again.
var ErrUnknownTenant = errors.New("unknown tenant")

// For generated code. TenantSetOpener returns the handler set of a
// tenant's database, made with NewTxSet on the client the application's
// opener returned for it, with opts.
type TenantSetOpener func(ctx context.Context, tenant string, opts ...Option) (*Set, error)

// TenantError is what Handle returns for a delivery it nacks because its
// tenant's database could not be opened: no attempt was counted and
// nothing was dead-lettered; the broker delivers the message again.
type TenantError struct {
	Tenant string
	Err    error
}

func (e *TenantError) Error() string {
	return fmt.Sprintf("consumer: tenant %q: its database cannot be opened (%v); the delivery is nacked, to come again", e.Tenant, e.Err)
}

func (e *TenantError) Unwrap() error { return e.Err }

// For generated code. NewTenantTxSet is NewTxSet on the fallback database
// (begin, db, deadLetter) whose deliveries are applied in their tenant's
// database: open returns the set of a tenant named by a message. The
// tenants' sets are opened at their first message and kept for the life
// of this one; each is given the handlers registered here.
func NewTenantTxSet(types []EventType, begin func(context.Context) (Tx, error), db dialect.ExecQuerier, tables Tables,
	deadLetter func(context.Context, DeadLetter) error, open TenantSetOpener, opts ...Option) *Set {
	s := NewTxSet(types, begin, db, tables, deadLetter, opts...)
	s.tenants = &tenantSets{fallback: s, open: open, opts: opts, sets: map[string]*tenantSet{},
		regs: map[string]map[string]registration{}}
	return s
}

// tenantSets holds the sets of the tenants met so far.
type tenantSets struct {
	fallback *Set // where what belongs to no tenant is written
	open     TenantSetOpener
	opts     []Option

	mu     sync.Mutex
	sets   map[string]*tenantSet
	regs   map[string]map[string]registration // consumer -> event -> handler, given to each tenant's set
	opened []*Set                             // the tenants' sets that have the handlers of regs
}

// registration is a handler registered in a transaction: many for one
// of many events at once (RegisterBatchInTx), else one.
type registration struct {
	one  TxHandlerFunc
	many TxBatchHandlerFunc
}

// tenantSet is one tenant's set, once opened; its mutex makes the
// deliveries of a tenant not yet opened open it once.
type tenantSet struct {
	mu       sync.Mutex
	set      *Set
	failures int // opens failed in a row
}

// register records a handler for the tenants' sets, and gives it to
// those opened already.
func (t *tenantSets) register(consumer, event string, r registration) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.regs[consumer] == nil {
		t.regs[consumer] = map[string]registration{}
	}
	t.regs[consumer][event] = r
	for _, set := range t.opened {
		if err := r.into(set, consumer, event); err != nil {
			return err
		}
	}
	return nil
}

func (r registration) into(s *Set, consumer, event string) error {
	if r.many != nil {
		return s.RegisterBatchInTx(consumer, event, r.many)
	}
	return s.RegisterInTx(consumer, event, r.one)
}

// handle runs a delivery in its tenant's set.
func (t *tenantSets) handle(ctx context.Context, consumer string, msg *message.Message) error {
	tenant := msg.Metadata.Get(events.MetaTenant)
	if tenant == "" {
		return t.setAside(ctx, consumer, msg, "no tenant: the message has no "+events.MetaTenant+
			" metadata, and this consumer applies each event in its tenant's database")
	}
	set, err := t.get(ctx, tenant)
	switch {
	case errors.Is(err, ErrUnknownTenant):
		return t.setAside(ctx, consumer, msg, fmt.Sprintf("unknown tenant %q: %v", tenant, err))
	case err != nil:
		return err
	}
	return set.Handle(ctx, consumer, msg)
}

// get returns tenant's set, opening it the first time. A failed open is
// tried again by the next delivery, after a pause that grows with the
// failures in a row (the set's backoff), so that a tenant whose database
// is down does not spin; its error is a *TenantError, or wraps
// ErrUnknownTenant.
func (t *tenantSets) get(ctx context.Context, tenant string) (*Set, error) {
	t.mu.Lock()
	ts := t.sets[tenant]
	if ts == nil {
		ts = &tenantSet{}
		t.sets[tenant] = ts
	}
	t.mu.Unlock()

	ts.mu.Lock()
	if ts.set != nil {
		defer ts.mu.Unlock()
		return ts.set, nil
	}
	set, err := t.openSet(ctx, tenant)
	if err == nil {
		ts.set = set
		if ts.failures > 0 {
			t.fallback.cfg.Logger.Info("Tenant's database opened again", watermill.LogFields{"tenant": tenant, "failures": ts.failures})
		}
		ts.failures = 0
		ts.mu.Unlock()
		return set, nil
	}
	if errors.Is(err, ErrUnknownTenant) {
		ts.mu.Unlock()
		return nil, err
	}
	ts.failures++
	failures := ts.failures
	ts.mu.Unlock()
	if failures == 1 {
		t.fallback.cfg.Logger.Error("Tenant's database cannot be opened: its deliveries are nacked until it can", err,
			watermill.LogFields{"tenant": tenant})
	}
	pause := time.NewTimer(t.fallback.cfg.backoff(failures))
	defer pause.Stop()
	select {
	case <-ctx.Done():
	case <-pause.C:
	}
	return nil, &TenantError{Tenant: tenant, Err: err}
}

// openSet opens tenant's set, checks its tables and gives it the
// handlers registered so far.
func (t *tenantSets) openSet(ctx context.Context, tenant string) (*Set, error) {
	opts := append(append([]Option(nil), t.opts...),
		WithLogger(t.fallback.cfg.Logger.With(watermill.LogFields{"tenant": tenant})))
	set, err := t.open(ctx, tenant, opts...)
	if err != nil {
		return nil, err
	}
	if set == nil {
		return nil, fmt.Errorf("the tenant opener returned no database for %q", tenant)
	}
	check, cancel := context.WithTimeout(ctx, schemaCheckTimeout)
	defer cancel()
	if err := set.checkSchema(check); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for consumer, handlers := range t.regs {
		for event, r := range handlers {
			if err := r.into(set, consumer, event); err != nil {
				return nil, err
			}
		}
	}
	t.opened = append(t.opened, set)
	return set, nil
}

// setAside stores msg as a dead letter of consumer in the fallback
// database, where a message that names no tenant, or one the opener does
// not know, is kept: it can be applied in no tenant's database. It is
// stored once per event and consumer, outside any aggregate's order (the
// fallback's positions are no tenant's). A letter that cannot be stored
// nacks the delivery, so nothing is lost.
func (t *tenantSets) setAside(ctx context.Context, consumer string, msg *message.Message, reason string) error {
	s := t.fallback
	if s.db == nil {
		return fmt.Errorf("consumer: %q: message %s set aside (%s), but the handler set has no fallback database to store it in",
			consumer, msg.UUID, reason)
	}
	m, _ := metaOf(msg) // as far as the message tells it
	m.Consumer = consumer
	if s.cfg.DeadLetterPublisher != nil {
		out := message.NewMessage(msg.UUID, msg.Payload)
		out.Metadata = maps.Clone(msg.Metadata)
		out.Metadata.Set(MetaDeadLetterReason, reason)
		out.Metadata.Set(MetaDeadLetterConsumer, consumer)
		out.Metadata.Set(MetaDeadLetterAttempts, strconv.Itoa(0))
		if err := s.cfg.DeadLetterPublisher.Publish(s.cfg.DeadLetterTopic, out); err != nil {
			return fmt.Errorf("consumer: publishing dead letter %s to %s: %w", msg.UUID, s.cfg.DeadLetterTopic, err)
		}
	}
	written, err := letters.Insert(ctx, s.db, s.tables.DeadLetters, s.tables.Positions != "",
		letters.Letter{Meta: m, Payload: msg.Payload, Reason: reason}, nil)
	if err != nil {
		return fmt.Errorf("consumer: %q: storing dead letter %s in the fallback database (%s): %w", consumer, msg.UUID, reason, err)
	}
	event := metricsUnknownEvent
	if _, ok := s.types[m.Name]; ok {
		event = m.Name
	}
	if !written { // set aside before: that letter was logged and counted
		s.cfg.Metrics.Delivery(consumer, event, metrics.ResultDuplicate, 0)
		return nil
	}
	s.cfg.Metrics.Delivery(consumer, event, metrics.ResultDeadLettered, 0)
	s.cfg.Metrics.ConsumerDeadLettered(consumer, metrics.ReasonTenant)
	s.cfg.Logger.Error(DeadLetteredLog, errors.New(reason), watermill.LogFields{
		"event_id": msg.UUID, "consumer": consumer, "tenant": m.Tenant, "event_name": m.Name,
		"event_version": m.Version, "aggregate_type": m.AggregateType, "aggregate_id": m.AggregateID,
		"attempts": 0, "database": "fallback"})
	return nil
}
