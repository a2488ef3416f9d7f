package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// fleetRun is the relay processes of one fleet row, each an `entoutbox
// relay --databases-file` over the run's tenants.
type fleetRun struct {
	rs    *relaySet
	addrs []string // each process's --metrics-addr
	apps  []string // each process's application_name (PGAPPNAME)
}

// startFleet starts procs fleet processes over dbs's file, publishing
// under prefix, with the bench's tuning flags and extra. Each names its
// connections "entoutbox fleet <run> <i>" through PGAPPNAME (the file's
// URLs name none), so that they can be counted per process across the
// tenants' databases.
func startFleet(e *env, dbs *fleetDBs, prefix string, procs int, extra ...string) (*fleetRun, error) {
	// --metrics-addr is how the bench sees the tenants' states; the
	// backlog gauges it also serves would read every tenant's database
	// every 15 s: read once at the start and then hourly, so that the
	// idle cost is the parked tenants'.
	args := []string{"relay", "--databases-file", dbs.file, "--broker", e.cfg.Broker, "--topic-prefix", prefix,
		"--log-level", "warn", "--fleet-idle-after", e.cfg.FleetIdleAfter.String(), "--fleet-backlog-interval", "1h"}
	args = append(args, e.tuningFlags()...)
	args = append(args, extra...)
	f := &fleetRun{rs: &relaySet{exited: make(chan struct{})}}
	for i := range procs {
		addr, err := freeAddr()
		if err != nil {
			_ = f.rs.stop()
			return nil, err
		}
		app := fmt.Sprintf("entoutbox fleet %s %d", strings.TrimPrefix(dbs.prefix, "bench_fleet_"), i+1)
		procArgs := append(append([]string{}, args...), "--metrics-addr", addr)
		if err := f.rs.startEnv(e.bin, procArgs, childEnv("PGAPPNAME="+app)); err != nil {
			_ = f.rs.stop()
			return nil, err
		}
		f.addrs, f.apps = append(f.addrs, addr), append(f.apps, app)
	}
	return f, nil
}

// tuningFlags is --poll-interval and --batch-size when the bench was
// given them.
func (e *env) tuningFlags() []string {
	var out []string
	if e.cfg.PollInterval > 0 {
		out = append(out, "--poll-interval", e.cfg.PollInterval.String())
	}
	if e.cfg.BatchSize > 0 {
		out = append(out, "--batch-size", strconv.Itoa(e.cfg.BatchSize))
	}
	return out
}

// childEnv is this process's environment without the variables that
// would give a fleet process a database of its own or name its
// connections, plus extra.
func childEnv(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "PGAPPNAME", "DATABASE_URL", "ENTOUTBOX_DATABASE_URL":
			continue
		}
		out = append(out, kv)
	}
	return append(out, extra...)
}

// fleetMetric reads series (a metric name with its labels, as
// exposed) from the /metrics of the process at addr.
func fleetMetric(ctx context.Context, addr, series string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("no series %s in the metrics of %s", series, addr)
}

// waitTenants waits until the processes of f together count want tenants
// in state (entoutbox_fleet_tenants), and fails after timeout or when a
// process ended.
func (f *fleetRun) waitTenants(ctx context.Context, state string, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	series := `entoutbox_fleet_tenants{state="` + state + `"}`
	var last error
	got := 0.0
	for {
		got, last = 0, nil
		for _, addr := range f.addrs {
			n, err := fleetMetric(ctx, addr, series)
			if err != nil {
				last = err
			}
			got += n
		}
		if last == nil && int(got) == want {
			return nil
		}
		if time.Now().After(deadline) {
			if last != nil {
				return fmt.Errorf("waiting %s for %d tenants %s: %w", timeout, want, state, last)
			}
			return fmt.Errorf("waiting %s for %d tenants %s: %v are", timeout, want, state, got)
		}
		select {
		case <-f.rs.failed():
			return f.rs.err()
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// loggedProblems says how many warnings and errors the processes
// logged (they run with --log-level warn) and the first, "" when none.
func (f *fleetRun) loggedProblems() string {
	counts := map[string]int{}
	first := ""
	for _, p := range f.rs.procs {
		for line := range strings.Lines(p.stderr.String()) {
			for _, level := range []string{"WARN", "ERROR"} {
				if !strings.Contains(line, "level="+level) {
					continue
				}
				if counts[level]++; first == "" {
					first = logMessage(line)
				}
			}
		}
	}
	if first == "" {
		return ""
	}
	return fmt.Sprintf("the fleet logged %d warnings and %d errors, the first: %s", counts["WARN"], counts["ERROR"], first)
}

// logMessage is the msg of a text log line, the line itself (cut at 300
// bytes) when it has none.
func logMessage(line string) string {
	if _, rest, ok := strings.Cut(line, ` msg="`); ok {
		if msg, _, ok := strings.Cut(rest, `"`); ok {
			return msg
		}
	}
	line = strings.TrimSpace(line)
	if len(line) > 300 {
		line = line[:300] + "…"
	}
	return line
}

// pid is the process id of the fleet's ith process.
func (f *fleetRun) pid(i int) int { return f.rs.procs[i].cmd.Process.Pid }

// appConns counts, every 100 ms, the server's connections whose
// application_name starts with prefix, across every database, by name:
// the most at once and the mean over the samples.
type appConns struct {
	mu      sync.Mutex
	max     map[string]int
	sum     map[string]int
	samples int
	stop    context.CancelFunc
	done    chan struct{}
}

func watchApps(admin *sql.DB, prefix string) *appConns {
	ctx, stop := context.WithCancel(context.Background())
	w := &appConns{max: map[string]int{}, sum: map[string]int{}, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			w.sample(ctx, admin, prefix)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

func (w *appConns) sample(ctx context.Context, admin *sql.DB, prefix string) {
	rows, err := admin.QueryContext(ctx, `SELECT application_name, count(*) FROM pg_stat_activity
		WHERE left(application_name, length($1)) = $1 GROUP BY 1`, prefix)
	if err != nil {
		return
	}
	defer rows.Close()
	w.mu.Lock()
	defer w.mu.Unlock()
	for rows.Next() {
		var name string
		var n int
		if rows.Scan(&name, &n) == nil {
			w.max[name] = max(w.max[name], n)
			w.sum[name] += n
		}
	}
	if rows.Err() == nil {
		w.samples++
	}
}

// connStat is one process's connections over a phase.
type connStat struct {
	max  int
	mean float64
	n    int // samples
}

func (c connStat) String() string {
	if c.n == 0 {
		return "-"
	}
	return fmt.Sprintf("%d / %.1f", c.max, c.mean)
}

// finish stops the sampling and returns app's connections.
func (w *appConns) finish(app string) connStat {
	w.stop()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.samples == 0 {
		return connStat{}
	}
	return connStat{max: w.max[app], mean: float64(w.sum[app]) / float64(w.samples), n: w.samples}
}

// procMeter measures a process's CPU from now on.
type procMeter struct {
	pid int
	at  time.Time
	cpu time.Duration
	ok  bool
}

func meterProc(pid int) procMeter {
	_, cpu, ok := procCPU(filepath.Join("/proc", strconv.Itoa(pid)))
	return procMeter{pid: pid, at: time.Now(), cpu: cpu, ok: ok}
}

// pct is the process's CPU since the meter started, in % of one core;
// negative when it could not be read.
func (m procMeter) pct() float64 {
	_, cpu, ok := procCPU(filepath.Join("/proc", strconv.Itoa(m.pid)))
	wall := time.Since(m.at)
	if !m.ok || !ok || wall <= 0 {
		return -1
	}
	return 100 * float64(cpu-m.cpu) / float64(wall)
}

// fmtPct prints a CPU share, "-" when not measured.
func fmtPct(p float64) string {
	if p < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", p)
}

// fmtMB prints a size in kB as MB, "-" when not measured.
func fmtMB(kb int64) string {
	if kb <= 0 {
		return "-"
	}
	return fmt.Sprintf("%d MB", (kb+512)/1024)
}

// serverConns samples, every 200 ms until stopped, how many client
// connections the whole server holds: the fleet shares it with every
// other client, up to its max_connections.
type serverConns struct {
	peak    int
	limit   int
	samples int
	stop    context.CancelFunc
	done    chan struct{}
}

func watchServer(admin *sql.DB) *serverConns {
	ctx, stop := context.WithCancel(context.Background())
	w := &serverConns{stop: stop, done: make(chan struct{})}
	_ = admin.QueryRowContext(ctx, `SELECT current_setting('max_connections')::int`).Scan(&w.limit)
	go func() {
		defer close(w.done)
		for {
			var n int
			if admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'`).Scan(&n) == nil {
				w.peak, w.samples = max(w.peak, n), w.samples+1
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return w
}

// finish stops the sampling and says what it saw.
func (w *serverConns) finish() string {
	w.stop()
	<-w.done
	if w.samples == 0 {
		return ""
	}
	return fmt.Sprintf("the server held at most %d client connections of its max_connections %d (every client's)", w.peak, w.limit)
}
