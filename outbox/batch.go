package outbox

import (
	"context"
	"fmt"
	"sync"

	"entgo.io/ent/dialect"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/events"
)

// Batch holds the events emitted in one transaction and writes them
// together, in one statement (per thousand events), when the transaction commits (generated code flushes it from an ent
// commit hook) or when Flush is called. Ten events then cost about what
// one does: one round trip instead of ten.
//
// Events keep their emit order: they are inserted in it, so the relay
// delivers them in it. An event given its own id (events.WithEventID) may
// be a duplicate, which the caller must learn at once: it is written right
// away, after the events held before it, and reported as
// events.ErrDuplicateEventID with the transaction still usable. Events
// with generated ids cannot collide.
//
// Until a flush, held events are not in the table: queries in the same
// transaction do not see them (generated code's Emitted flushes first).
// A Batch is safe for concurrent use.
type Batch struct {
	drv   dialect.ExecQuerier
	table string

	mu   sync.Mutex
	held []Row
}

// maxBatchRows bounds the rows of one INSERT: PostgreSQL takes at most
// 65535 parameters in a statement, and each row has 8.
const maxBatchRows = 1000

// NewBatch returns a Batch writing to table through drv, the driver of an
// ent transaction.
func NewBatch(drv dialect.ExecQuerier, table string) *Batch {
	return &Batch{drv: drv, table: table}
}

// Add checks ev and holds it until the next flush, or writes it at once
// when cfg gives it an id. The id is chosen here, so cfg.IDTo learns it
// without a write.
func (b *Batch) Add(ctx context.Context, ev Event, cfg events.EmitConfig) error {
	given := cfg.EventID != uuid.Nil
	if !given {
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("outbox: generating event id: %w", err)
		}
		cfg.EventID = id
	}
	r, err := newRow(ev, cfg)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !given {
		b.held = append(b.held, r)
	} else {
		if err := b.flushLocked(ctx); err != nil {
			return err
		}
		if err := insert(ctx, b.drv, b.table, []Row{r}); err != nil {
			return err
		}
	}
	if cfg.IDTo != nil {
		*cfg.IDTo = cfg.EventID
	}
	return nil
}

// Flush writes every event held. On an error the events are dropped, and
// the transaction must roll back.
func (b *Batch) Flush(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.flushLocked(ctx)
}

func (b *Batch) flushLocked(ctx context.Context) error {
	held := b.held
	b.held = nil
	for len(held) > 0 {
		n := min(len(held), maxBatchRows)
		if err := insert(ctx, b.drv, b.table, held[:n]); err != nil {
			return err
		}
		held = held[n:]
	}
	return nil
}
