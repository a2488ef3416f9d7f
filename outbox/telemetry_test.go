package outbox

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// Outside a handler and a span, Emit adds no header and allocates nothing
// for it. Not parallel: AllocsPerRun.
func TestContextHeadersCostNothingWhenThereIsNothingToAdd(t *testing.T) {
	h := map[string]string{"k": "v"}
	ctx := context.Background()
	require.Equal(t, h, contextHeaders(ctx, h))
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = contextHeaders(ctx, h) }))
}
