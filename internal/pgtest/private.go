package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/entoutbox/entoutbox/internal/pgschema"
)

// Private is a PostgreSQL server of one test's own, in a temporary data
// directory on a free port, for tests that stop, crash or restart the
// server: never the shared one. It runs as the postgres OS user when the
// test runs as root (PostgreSQL refuses root), and is stopped when the test
// ends.
type Private struct {
	URL  string // of its database postgres, as user postgres (trust auth)
	Port int

	dir, data, bin string
	settings       []string
	asPostgres     bool
}

// StartPrivate initialises and starts a private server with wal_level
// logical and the given extra settings ("name=value"). It skips t when
// PostgreSQL's server binaries are not installed (fails under CI=true).
func StartPrivate(t testing.TB, settings ...string) *Private {
	t.Helper()
	bin, err := serverBinaries()
	if err != nil {
		Unavailable(t, "a private PostgreSQL server (initdb, pg_ctl)", err)
	}
	dir, err := os.MkdirTemp("", "entoutbox-pg")
	if err != nil {
		t.Fatalf("creating a directory for a private PostgreSQL: %v", err)
	}
	p := &Private{dir: dir, data: filepath.Join(dir, "data"), bin: bin,
		settings: append([]string{"wal_level=logical", "max_replication_slots=4", "max_wal_senders=4", "fsync=off",
			"listen_addresses=127.0.0.1", "unix_socket_directories=" + dir}, settings...)}
	t.Cleanup(func() {
		_ = p.pgCtl("stop", "-m", "immediate")
		_ = os.RemoveAll(dir)
	})
	if u, err := user.Current(); err == nil && u.Uid == "0" {
		p.asPostgres = true
		// The server's user must reach its directory.
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatalf("opening %s to the postgres user: %v", dir, err)
		}
		if out, err := exec.Command("chown", "postgres", dir).CombinedOutput(); err != nil {
			t.Fatalf("giving %s to the postgres user: %v: %s", dir, err, out)
		}
	}
	if out, err := p.command(filepath.Join(bin, "initdb"), "-D", p.data, "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v: %s", err, out)
	}
	if p.Port, err = freePort(); err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	p.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.Port)
	p.Start(t)
	return p
}

// Start starts the server and waits until it takes connections.
func (p *Private) Start(t testing.TB) {
	t.Helper()
	opts := "-p " + strconv.Itoa(p.Port)
	for _, s := range p.settings {
		opts += " -c " + s
	}
	if err := p.pgCtl("start", "-w", "-t", "60", "-l", filepath.Join(p.dir, "log"), "-o", opts); err != nil {
		log, _ := os.ReadFile(filepath.Join(p.dir, "log"))
		t.Fatalf("starting the private PostgreSQL: %v\n%s", err, log)
	}
}

// Stop stops the server: mode "fast" (a clean shutdown) or "immediate" (as
// a crash: recovery runs at the next start).
func (p *Private) Stop(t testing.TB, mode string) {
	t.Helper()
	if err := p.pgCtl("stop", "-w", "-m", mode); err != nil {
		t.Fatalf("stopping the private PostgreSQL: %v", err)
	}
}

// Open opens a pool on the server and waits until it answers.
func (p *Private) Open(t testing.TB) *sql.DB {
	t.Helper()
	db, err := pgschema.Open(p.URL)
	if err != nil {
		t.Fatalf("opening %s: %v", p.URL, err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("the private PostgreSQL does not answer: %v", err)
	}
	return db
}

func (p *Private) pgCtl(args ...string) error {
	args = append(args, "-D", p.data)
	out, err := p.command(filepath.Join(p.bin, "pg_ctl"), args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

func (p *Private) command(name string, args ...string) *exec.Cmd {
	if p.asPostgres {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
	}
	return exec.Command(name, args...)
}

// serverBinaries finds the directory of initdb and pg_ctl: the newest
// /usr/lib/postgresql/<version>/bin, or PATH's.
func serverBinaries() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if path, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(path), nil
	}
	return "", errors.New("initdb is neither in /usr/lib/postgresql/*/bin nor on PATH")
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
