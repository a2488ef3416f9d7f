package main

import (
	"bytes"
	"context"
	"fmt"
	neturl "net/url"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/mysqltest"
	"github.com/entoutbox/entoutbox/internal/pgtest"
)

func TestExampleRunsEndToEnd(t *testing.T) {
	db := pgtest.New(t) // reachability check and a schema name of our own
	var out bytes.Buffer
	schema := db.Schema + "_ex"
	t.Cleanup(func() { _, _ = db.DB.Exec(`DROP SCHEMA IF EXISTS "` + schema + `" CASCADE`) })
	err := Run(context.Background(), &out, Config{DatabaseURL: pgtest.ServerURL(), Schema: schema, Orders: 3, Timeout: 3 * time.Minute})
	// PostgreSQL's sequence gives the rolled-back order's id to no one.
	requireExampleRan(t, out.String(), err, 5, 6)
}

// On MariaDB (or MySQL), in a database of the test's own.
func TestExampleRunsEndToEndOnMariaDB(t *testing.T) {
	t.Parallel()
	_, url := mysqltest.Open(t) // made afresh by the example, dropped at the end
	u, err := neturl.Parse(url)
	require.NoError(t, err)
	var out bytes.Buffer
	err = Run(context.Background(), &out, Config{DatabaseURL: url, Schema: path.Base(u.Path), Orders: 3, Timeout: 3 * time.Minute})
	// InnoDB's auto-increment, like PostgreSQL's sequence, gives the
	// rolled-back order's id to no one.
	requireExampleRan(t, out.String(), err, 5, 6)
}

// The example's default: SQLite and the embedded NATS, nothing installed.
func TestExampleRunsEndToEndOnSQLite(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	url := "sqlite:" + filepath.Join(t.TempDir(), "orders.db")
	err := Run(context.Background(), &out, Config{DatabaseURL: url, Orders: 3, Timeout: 3 * time.Minute})
	requireExampleRan(t, out.String(), err, 4, 5)
}

// requireExampleRan checks what the example printed: unpaid is the order
// left unpaid, paidInTime the one paid before its deadline.
func requireExampleRan(t *testing.T, got string, err error, unpaid, paidInTime int) {
	t.Helper()
	t.Log(got)
	require.NoError(t, err)
	require.Contains(t, got, "started an embedded NATS JetStream server")
	require.Contains(t, got, "rolled back: customer-declined")
	require.Contains(t, got, `refused: events: invalid "order.paid" v2 payload: field "currency" value "JPY" is not one of [EUR USD GBP]`)
	require.Contains(t, got, `refused: events: invalid "order.placed" v1 payload: field "lines[1].qty" value 0 is below the minimum 1`)
	require.Contains(t, got, "outbox holds 6 committed events")
	for i, line := range []string{"shipping: order 1, 2 items in 2 lines to customer-1, Paris, FR",
		"shipping: order 2, 3 items in 2 lines to customer-2, Paris, FR", "shipping: order 3, 4 items in 2 lines to customer-3, Paris, FR"} {
		require.Equal(t, 1, strings.Count(got, line), "order %d shipped once: %s", i+1, line)
	}
	for _, line := range []string{"invoiced order 1, 10.00 EUR", "invoiced order 2, 20.00 EUR", "invoiced order 3, 30.00 EUR"} {
		require.Equal(t, 1, strings.Count(got, line), "once: %s", line)
	}
	require.NotContains(t, got, "invoiced order 4", "the rolled-back order's event must not be relayed")
	require.Contains(t, got, "delivered again, skipped: already processed")
	require.Contains(t, got, fmt.Sprintf("order %d paid in time: its scheduled order.cancelled is cancelled", paidInTime))
	require.Equal(t, 1, strings.Count(got, fmt.Sprintf("expiry: order %d cancelled: not paid within 1s (due ", unpaid)),
		"the unpaid order's deadline came once")
	require.NotContains(t, got, fmt.Sprintf("expiry: order %d", paidInTime), "a deadline called off is never delivered")
	require.Contains(t, got, "done: 3 orders placed and paid, 7 events relayed (pending in the outbox: 0), 3 shipped, 3 invoices written once each, 1 unpaid order cancelled when its deadline came")
}

// The application binary must not carry the code generator.
func TestBinaryDoesNotCarryTheGenerator(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, dep := range strings.Fields(string(out)) {
		require.NotEqual(t, "entgo.io/ent/entc/gen", dep)
		require.False(t, strings.HasPrefix(dep, "golang.org/x/tools"), "imports %s", dep)
		require.NotEqual(t, "github.com/entoutbox/entoutbox/codegen", dep)
	}
}

// A database that cannot be reached is reported without its password, however
// the password is given.
func TestUnreachableDatabaseHidesPassword(t *testing.T) {
	const secret = "s3cret-Pw"
	for _, dsn := range []string{
		"postgres://postgres:" + secret + "@127.0.0.1:1/test?sslmode=disable",
		"postgres://postgres@127.0.0.1:1/test?sslmode=disable&password=" + secret,
		"host=127.0.0.1 port=1 user=postgres password=" + secret + " dbname=test sslmode=disable",
	} {
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := Run(ctx, &out, Config{DatabaseURL: dsn, Schema: "orders_example", Orders: 1, Timeout: time.Second})
		cancel()
		require.Error(t, err, dsn)
		require.Contains(t, err.Error(), "connect", "the error should say what failed: %v", err)
		require.NotContains(t, err.Error(), secret)
		require.NotContains(t, out.String(), secret)
	}
}
