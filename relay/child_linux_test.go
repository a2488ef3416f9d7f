package relay_test

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// startDyingWithTest starts cmd so that it dies with the test process: a
// killed test leaves no child behind. Linux sends the death signal when the
// parent *thread* ends, not the process, and Go may end the thread a
// goroutine ran on; so the child is started from a goroutine locked to its
// own thread, which lives until the test's cleanup (a child still running
// then is killed with it).
func startDyingWithTest(t testing.TB, cmd *exec.Cmd) {
	t.Helper()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	started := make(chan error)
	release := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		started <- cmd.Start()
		<-release
	}()
	t.Cleanup(func() { close(release) })
	require.NoError(t, <-started)
}
