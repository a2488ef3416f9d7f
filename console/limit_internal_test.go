package console

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An address past its attempts waits until its window ends, then has its
// attempts again.
func TestLoginLimitWindow(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	l := newLoginLimit(2)
	l.now = func() time.Time { return now }
	l.failed("a")
	require.Zero(t, l.wait("a"), "one of two")
	now = now.Add(10 * time.Second)
	l.failed("a")
	require.Equal(t, 50*time.Second, l.wait("a"), "two of two: until the window that began at the first ends")
	require.Zero(t, l.wait("b"))
	now = now.Add(50 * time.Second)
	require.Zero(t, l.wait("a"), "the window ended")
	l.failed("a")
	require.Zero(t, l.wait("a"), "one of two in the new window")
	require.Zero(t, newLoginLimit(-1).wait("a"), "no limit")
}
