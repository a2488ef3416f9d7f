//go:build linux

package relay_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/pgschema"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/relay"
)

// startPgBouncer runs a PgBouncer of the test's own in transaction mode in
// front of the test server, its database "outbox" being b's schema, and
// returns its URL. It skips when pgbouncer is not installed, unless
// CI=true (.ci/run installs it).
func startPgBouncer(t *testing.T, b *emitBundle) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("pgbouncer is not installed, and CI=true: .ci/run installs it (apt-get install pgbouncer)")
		}
		t.Skip("skipping: pgbouncer is not installed (apt-get install pgbouncer)")
	}
	server, err := url.Parse(pgtest.ServerURL())
	require.NoError(t, err)
	host, port, err := net.SplitHostPort(server.Host)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	listen := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	// Sessions do not carry over in transaction mode: each server
	// connection gets the schema when it is opened.
	conf := fmt.Sprintf(`[databases]
outbox = host=%s port=%s dbname=%s user=postgres connect_query='SET search_path TO %s'
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = transaction
ignore_startup_parameters = extra_float_digits,search_path
`, host, port, server.Path[1:], b.db.Schema, listen)
	f, err := os.CreateTemp("", "pgbouncer-*.ini")
	require.NoError(t, err)
	t.Cleanup(func() { os.Remove(f.Name()) })
	_, err = f.WriteString(conf)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, os.Chmod(f.Name(), 0o644))

	cmd := exec.Command(bin, f.Name())
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if os.Geteuid() == 0 { // PgBouncer refuses to run as root
		nobody, err := user.Lookup("nobody")
		require.NoError(t, err)
		uid, _ := strconv.Atoi(nobody.Uid)
		gid, _ := strconv.Atoi(nobody.Gid)
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	startDyingWithTest(t, cmd)
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(listen))
	require.Eventually(t, func() bool {
		select {
		case <-exited: // e.g. another process took the port first
			require.FailNow(t, "pgbouncer exited", "%s", logs)
		default:
		}
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, patience, 20*time.Millisecond, "pgbouncer did not start: %s", logs)
	// PgBouncer before 1.21 knows nothing of prepared statements: pgx must
	// not cache them.
	return "postgres://postgres@" + addr + "/outbox?sslmode=disable&default_query_exec_mode=simple_protocol"
}

// Behind a real PgBouncer in transaction mode: a LISTEN through it hears
// nothing, and the check says so; with ListenDB a direct connection (and
// PollOnly), the check passes and each row is woken by its notification.
// Rows are delivered either way.
func TestListenBehindPgBouncer(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	pooled, err := pgschema.Open(startPgBouncer(t, b))
	require.NoError(t, err)
	t.Cleanup(func() { pooled.Close() })

	run := func(t *testing.T, cfg relay.SubscriberConfig) (*captureLogs, *received) {
		logs := newCaptureLogs()
		cfg.Logger = logs
		sub, err := relay.NewSubscriber(pooled, cfg)
		require.NoError(t, err)
		relay.SetRescanEvery(sub, 10*time.Minute) // only a notification or a poll wakes a row
		t.Cleanup(func() { _ = sub.Close() })
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		msgs, err := sub.Subscribe(ctx, relay.AllTopics)
		require.NoError(t, err)
		got := newReceived()
		go consume(ctx, msgs, got)
		return logs, got
	}

	t.Run("listening through the pooler", func(t *testing.T) {
		logs, got := run(t, relay.SubscriberConfig{PollInterval: 200 * time.Millisecond})
		require.Eventually(t, func() bool { return len(logsStarting(logs, watermill.ErrorLogLevel, lostNotificationsLog)) == 1 },
			patience, 20*time.Millisecond, "the lost notifications were not reported")
		want := emitOrdersAs(t, b.client, "pooled", 10, 2, 0)
		got.waitFor(t, want, patience)
	})
	t.Run("listening on a direct connection", func(t *testing.T) {
		logs, got := run(t, relay.SubscriberConfig{PollInterval: time.Minute, PollOnly: true, ListenDB: b.db.DB})
		require.Eventually(t, func() bool { return len(logsStarting(logs, watermill.DebugLogLevel, arrivingNotificationsLog)) == 1 },
			patience, 20*time.Millisecond, "the check did not see its notification")
		require.Empty(t, logsStarting(logs, watermill.ErrorLogLevel, lostNotificationsLog))
		for i := range 5 {
			want := emitOrdersAs(t, b.client, fmt.Sprint("direct", i), 1, 1, 0)
			sent := time.Now()
			got.waitFor(t, want, patience)
			require.Less(t, time.Since(sent), 20*time.Second, "row %d was not woken by its notification (polling is every minute)", i)
		}
	})
}
