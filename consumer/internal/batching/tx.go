package batching

// The handlers a batch runs, and the transaction they share. The consumer
// package exposes these types (aliases) for generated code.

import (
	"context"
	"fmt"

	"entgo.io/ent/dialect"

	"github.com/entoutbox/entoutbox/events"
)

// Tx is a transaction the handler set begins for handlers registered in
// a transaction: the generated code's ent transaction, with its driver to
// write the dedupe records and positions through.
type Tx interface {
	dialect.ExecQuerier
	Commit() error
	Rollback() error
}

// TxHandlerFunc is one registered handler, run in tx, which the set
// began, recorded the event in and commits: it writes the event's effect.
// Several events' handlers may share one tx.
type TxHandlerFunc func(ctx context.Context, tx Tx, payload any, m events.Meta) error

// TxBatchHandlerFunc writes the effects of many events (payloads[i],
// metas[i], in their aggregates' order) in tx. Its ctx is the batch's,
// carrying no one event: events it emits name their cause only where it
// passes events.WithCause(ctx, metas[i]).
type TxBatchHandlerFunc func(ctx context.Context, tx Tx, payloads []any, metas []events.Meta) error

// PanicError is the error a handler panic turns into: the transaction rolls
// back and the delivery is retried like any failure.
type PanicError struct {
	Value any
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }
