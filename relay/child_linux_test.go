package relay_test

import (
	"os/exec"
	"syscall"
)

// dieWithTest makes a child relay die with the test process, so that a
// killed test leaves no relay behind.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
