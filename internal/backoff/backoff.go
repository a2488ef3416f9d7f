// Package backoff computes exponential retry waits, and waits them.
package backoff

import (
	"context"
	"time"
)

// Exponential is the wait after the given failed attempt (1-based):
// initial, doubling after each further failure, never above max.
func Exponential(initial, max time.Duration, attempt int) time.Duration {
	d := initial
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// Sleep waits d, or until ctx ends: false then.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
