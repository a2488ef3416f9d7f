// Package backoff computes exponential retry waits.
package backoff

import "time"

// Exponential is the wait after the given failed attempt (1-based):
// initial, doubling after each further failure, never above max.
func Exponential(initial, max time.Duration, attempt int) time.Duration {
	d := initial
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}
