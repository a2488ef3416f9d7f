package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopTimeout is how long a relay gets to finish after SIGTERM; its own
// --close-timeout is 30 s.
const stopTimeout = 40 * time.Second

// relaySet is the relay processes of one row: `entoutbox relay` children,
// so that each one's peak memory is its own and measurable.
type relaySet struct {
	procs  []*relayProc
	exited chan struct{} // closed when the first process ends by itself
	// pprofAddr serves the first relay's profiles (see --relay-profile).
	pprofAddr string
	once      sync.Once
	mu        sync.Mutex
	first     error // why the first process ended
	closed    bool  // stop was called: later exits are expected
}

type relayProc struct {
	cmd    *exec.Cmd
	stderr *capBuffer
	done   chan struct{} // closed when the process has been waited for
	err    error         // from Wait
	killed bool          // ended by kill, on purpose: guarded by the set's mu
}

// startRelays starts n relays of command bin (the env's when "") on the
// sandbox's outbox with path and topic prefix, passing the bench's
// --poll-interval (but to the wal path) and --batch-size when given.
func startRelays(e *env, s *sandbox, bin, path, prefix string, n int, flags ...string) (*relaySet, error) {
	if bin == "" {
		bin = e.bin
	}
	args := []string{"relay", "--database-url", s.url, "--broker", e.cfg.Broker, "--path", path,
		"--topic-prefix", prefix, "--log-level", "error"}
	if path == "wal" {
		args = append(args, "--slot", s.walName(), "--publication", s.walName())
	}
	if e.cfg.PollInterval > 0 && path != "wal" { // the wal path streams, and refuses the flag
		args = append(args, "--poll-interval", e.cfg.PollInterval.String())
	}
	if e.cfg.BatchSize > 0 {
		args = append(args, "--batch-size", strconv.Itoa(e.cfg.BatchSize))
	}
	args = append(args, flags...)
	rs := &relaySet{exited: make(chan struct{})}
	for i := range n {
		procArgs := args
		if i == 0 && e.cfg.RelayProfile != "" {
			addr, err := freeAddr()
			if err != nil {
				return nil, err
			}
			rs.pprofAddr = addr
			procArgs = append(slices.Clone(args), "--metrics-addr", addr, "--pprof")
		}
		procArgs = slices.Clone(procArgs)
		procArgs[2] = withApplicationName(s.url, fmt.Sprintf("entoutbox relay %d", i+1)) // --database-url
		if err := rs.start(bin, procArgs); err != nil {
			_ = rs.stop()
			return nil, err
		}
	}
	return rs, nil
}

// start runs one more relay of the set: bin with args.
func (rs *relaySet) start(bin string, args []string) error {
	return rs.startEnv(bin, args, nil)
}

// startEnv runs one more relay of the set: bin with args, in environment
// env (this process's when nil).
func (rs *relaySet) startEnv(bin string, args, env []string) error {
	p := &relayProc{cmd: exec.Command(bin, args...), stderr: &capBuffer{}, done: make(chan struct{})}
	p.cmd.Stderr = p.stderr
	p.cmd.Env = env
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("starting the relay: %w", err)
	}
	rs.procs = append(rs.procs, p)
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
		rs.ended(p)
	}()
	return nil
}

// pids is the process ids of the relays.
func (rs *relaySet) pids() []int {
	out := make([]int, len(rs.procs))
	for i, p := range rs.procs {
		out[i] = p.cmd.Process.Pid
	}
	return out
}

// ended records why a process ended unless the bench stopped it.
func (rs *relaySet) ended(p *relayProc) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.closed || p.killed {
		return
	}
	rs.once.Do(func() {
		rs.first = p.exitError()
		close(rs.exited)
	})
}

// exitError is the error the process printed, or its exit status.
func (p *relayProc) exitError() error {
	out := p.stderr.String()
	sc := bufio.NewScanner(strings.NewReader(out))
	var first string
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "entoutbox: ") {
			return errors.New(line) // the command's own error line
		}
		if first == "" && line != "" {
			first = line
		}
	}
	switch {
	case first != "":
		return errors.New(first)
	case p.err != nil:
		return fmt.Errorf("relay exited: %w", p.err)
	default:
		return errors.New("relay exited by itself with status 0")
	}
}

// failed is closed when a relay ended before stop; err says why.
func (rs *relaySet) failed() <-chan struct{} { return rs.exited }

func (rs *relaySet) err() error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.first
}

// survives waits up to d and reports why a relay ended meanwhile, if one
// did: a relay that cannot start (an unknown --path) exits at once.
func (rs *relaySet) survives(d time.Duration) error {
	select {
	case <-rs.exited:
		return rs.err()
	case <-time.After(d):
		return nil
	}
}

// peakKB is the largest VmHWM (peak resident set) of the processes, read
// from /proc while they still run; 0 when none could be read.
func (rs *relaySet) peakKB() int64 {
	var peak int64
	for _, p := range rs.procs {
		if kb, err := vmHWM(p.cmd.Process.Pid); err == nil && kb > peak {
			peak = kb
		}
	}
	return peak
}

func vmHWM(pid int) (int64, error) { return procStatusKB(pid, "VmHWM") }

// procStatusKB reads field (VmHWM, VmRSS) of a process's status, in kB.
func procStatusKB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the status of process %d: %w", pid, err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parsing %s %q: %w", field, v, err)
			}
			return kb, nil
		}
	}
	return 0, fmt.Errorf("no %s in the status of process %d", field, pid)
}

// stop sends SIGTERM to every relay and waits for them, killing one that
// does not finish within stopTimeout. It reports a relay that failed to
// stop cleanly; one that had already ended by itself was reported by err.
func (rs *relaySet) stop() error {
	rs.mu.Lock()
	already := rs.closed
	rs.closed = true
	rs.mu.Unlock()
	if already {
		return nil
	}
	for _, p := range rs.procs {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	var errs []error
	for _, p := range rs.procs {
		select {
		case <-p.done:
			if p.err != nil && rs.err() == nil && !rs.wasKilled(p) {
				errs = append(errs, fmt.Errorf("relay did not stop cleanly: %w", p.exitError()))
			}
		case <-time.After(stopTimeout):
			_ = p.cmd.Process.Kill()
			<-p.done
			errs = append(errs, fmt.Errorf("relay killed: not stopped %s after SIGTERM", stopTimeout))
		}
	}
	return errors.Join(errs...)
}

// kill ends process i with SIGKILL, as a crash would, and waits for it:
// its end is the measurement's, not a failure of the set.
func (rs *relaySet) kill(i int) error {
	p := rs.procs[i]
	rs.mu.Lock()
	p.killed = true
	rs.mu.Unlock()
	if err := p.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("killing relay process %d: %w", p.cmd.Process.Pid, err)
	}
	<-p.done
	return nil
}

func (rs *relaySet) wasKilled(p *relayProc) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return p.killed
}

// capBuffer keeps the first 64 KiB a child writes to stderr.
type capBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const capBufferMax = 64 << 10

func (b *capBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := capBufferMax - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (b *capBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// freeAddr is a loopback address with a port free at the time of asking.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port for the relay's profile: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// profile writes a CPU profile of the first relay, taken over d from now,
// to path. It runs beside the drain; a failure is only reported.
func (rs *relaySet) profile(d time.Duration, path string) <-chan error {
	out := make(chan error, 1)
	go func() {
		out <- func() error {
			url := "http://" + rs.pprofAddr + "/debug/pprof/profile?seconds=" + strconv.Itoa(max(int(d.Seconds()), 1))
			var resp *http.Response
			var err error
			for range 50 { // the relay may still be starting its server
				if resp, err = http.Get(url); err == nil {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", url, resp.Status)
			}
			f, err := os.Create(path)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, resp.Body); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		}()
	}()
	return out
}
