package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/entoutbox/entoutbox/relay/internal/engine"
)

// readyTimeout bounds each of Ready's checks, so that a database or broker
// that hangs makes the relay unready in moments rather than hang a probe.
const readyTimeout = 2 * time.Second

// Ready reports whether the relay can deliver now: the database answers a
// ping, the broker answers one (when the publisher can be pinged, as every
// broker.Broker's can), and on the fast path the Subscriber may send (it
// holds its liveness lock and renewed its leases lately) or is a member
// waiting for its share of partitions (so a fast relay that is not
// running is not ready); on the WAL path it streams the slot or waits as
// its standby. The error says which failed. It is meant for a
// readiness probe, and bounds each check to a few seconds.
func (r *Relay) Ready(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := r.cfg.DB.PingContext(pctx); err != nil {
		return fmt.Errorf("relay: database is not reachable: %w", err)
	}
	if p, ok := r.cfg.Publisher.(engine.Pinger); ok {
		bctx, cancel := context.WithTimeout(ctx, readyTimeout)
		defer cancel()
		if err := p.Ping(bctx); err != nil {
			return fmt.Errorf("relay: broker is not reachable: %w", err)
		}
	}
	if r.cfg.Path == PathWAL {
		st, ok := r.WALStatus()
		switch {
		case !ok:
			return errors.New("relay: not running")
		case st.Role != WALActive && st.Role != WALStandby:
			return fmt.Errorf("relay: the WAL relay neither streams slot %q nor waits as its standby (%s)", r.cfg.WAL.Slot, st.Role)
		}
		return nil
	}
	if r.cfg.Path != PathFast {
		return nil
	}
	st, ok := r.Status()
	switch {
	case !ok:
		return errors.New("relay: not running")
	case !st.Live && !st.Waiting:
		return fmt.Errorf("relay: the subscriber may not send (its liveness lock is not held or its leases were not "+
			"renewed within two thirds of the lease) and is not waiting for partitions; it owns %d", st.Partitions)
	}
	return nil
}
