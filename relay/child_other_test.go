//go:build !linux

package relay_test

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

func startDyingWithTest(t testing.TB, cmd *exec.Cmd) {
	t.Helper()
	require.NoError(t, cmd.Start())
}
