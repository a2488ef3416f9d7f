package relay

import (
	"context"
	"database/sql"
	"errors"

	"github.com/entoutbox/entoutbox/metrics"
	"github.com/entoutbox/entoutbox/relay/internal/fastpath"
)

// engineBuffer is the room of the fast source's channel to the engine: the
// subscription hands out in bursts while the engine publishes.
const engineBuffer = 16

// runFast publishes what the fast source hands out, many at a time: it
// hands out at most one row per aggregate until that one is settled, so
// concurrency never reorders an aggregate.
func (r *Relay) runFast(ctx context.Context) error {
	src, err := newFastSource(r.cfg.DB, r.cfg.subscriberConfig(), r.cfg.Metrics)
	if err != nil {
		return err
	}
	defer src.Close()
	src.Hooks = r.fastHooks
	r.fast.Store(src)
	defer r.cfg.Metrics.WatchPartitions(func() int {
		st, _ := r.Status()
		return st.Partitions
	})()
	readCtx, stopReading := context.WithCancel(context.Background())
	defer stopReading()
	sub, err := src.Subscribe(readCtx, "", engineBuffer)
	if err != nil {
		return err
	}
	r.cfg.Logger.Info("Relay running", map[string]any{"path": r.cfg.Path, "table": r.cfg.Table})

	e := r.newEngine(r.cfg.Concurrency, src.Policy())
	e.Run(ctx, sub.Next)
	// Stop taking rows, let the publishes in flight finish and be
	// recorded, then close releases everything else.
	stopReading()
	e.Close(r.cfg.CloseTimeout)
	if ctx.Err() == nil {
		return errors.New("relay: the outbox subscription ended")
	}
	return nil
}

// Status is the fast path's status while the relay runs it; false when it
// runs another path, or does not run.
func (r *Relay) Status() (SubscriberStatus, bool) {
	src := r.fast.Load()
	if src == nil || src.IsClosed() {
		return SubscriberStatus{}, false
	}
	return SubscriberStatus(src.Status()), true
}

// newFastSource checks cfg and returns a fast source on db (the pgx
// database/sql driver) with cfg's defaults, reporting to m (nil for none).
func newFastSource(db *sql.DB, cfg SubscriberConfig, m *metrics.Metrics) (*fastpath.Source, error) {
	if db == nil {
		return nil, errors.New("relay: DB is nil")
	}
	if err := cfg.validate("SubscriberConfig."); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	return fastpath.New(db, fastpath.Settings{Table: cfg.Table, DeadLetterTable: cfg.DeadLetterTable,
		RelayID: cfg.RelayID, BatchSize: cfg.BatchSize, MaxBytesInFlight: cfg.MaxBytesInFlight, Lease: cfg.Lease,
		Partitions: cfg.Partitions, PollInterval: cfg.PollInterval, PollOnly: cfg.PollOnly, ListenDB: cfg.listenDB(db),
		Delete: cfg.Delete, DeliveredLog: cfg.DeliveredLog, MaxAttempts: cfg.MaxAttempts, Backoff: cfg.backoff, CloseTimeout: cfg.CloseTimeout,
		Logger: cfg.Logger, Attributes: attributes(cfg.Tenant, cfg.CloudEvents), Metrics: m}), nil
}
