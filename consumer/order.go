package consumer

// Each consumer name applies an aggregate's events in the order they were
// written (internal/ordering holds the rule; wait.go, turns.go and
// wake.go wait for an event's predecessor; internal/batching applies runs).

import "github.com/entoutbox/entoutbox/consumer/internal/ordering"

// OutOfOrderError is what the handler's transaction returns for an event
// that comes before its consumer applied its predecessor: it is not a
// handler failure, and Handle waits for the predecessor (a gap).
type OutOfOrderError = ordering.OutOfOrderError

// HeldError is what the handler's transaction returns for an event of an
// aggregate held behind a dead letter: Handle sets it aside at once, with
// this error as its reason, so that it waits for the repair in the dead
// letters rather than in the broker.
type HeldError = ordering.HeldError
