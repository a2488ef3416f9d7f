package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/ent"
	"github.com/entoutbox/entoutbox/internal/pgtest"
)

func TestConsoleRefusesNonLoopbackWithoutToken(t *testing.T) {
	_, err := run(t, nil, "console", "--addr", "0.0.0.0:8080", "--database-url", pgtest.DefaultURL)
	require.ErrorContains(t, err, "console: address 0.0.0.0:8080 is not a loopback address")
	require.ErrorContains(t, err, "set --token")
	_, err = run(t, nil, "console", "--addr", ":8080", "--database-url", pgtest.DefaultURL)
	require.ErrorContains(t, err, "listens on every interface")
}

// The console serves the tables --table and --dead-letter-table name.
func TestConsoleServes(t *testing.T) {
	db := pgtest.New(t)
	pgtest.Migrate(t, ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db.DB))).Schema.Create)
	shopTables(t, db)
	_, err := db.DB.Exec(`INSERT INTO shop_outbox (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload)
		SELECT gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', g::text, '{}' FROM generate_series(1, 2) g`)
	require.NoError(t, err)
	pr, pw := io.Pipe()
	cmd := newRootCommand()
	cmd.SetOut(pw)
	cmd.SetErr(pw)
	cmd.SetArgs([]string{"console", "--addr", "127.0.0.1:0", "--database-url", db.URL, "--table", "shop_outbox",
		"--dead-letter-table", "shop_letters"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx); pw.Close() }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	require.NoError(t, err)
	u := strings.TrimSpace(strings.TrimPrefix(line, "entoutbox console on "))
	require.True(t, strings.HasPrefix(u, "http://127.0.0.1:"), line)
	go func() { _, _ = io.Copy(io.Discard, pr) }()

	resp, err := http.Get(u)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, string(body), `id="pending">2<`, "shop_outbox's backlog")
	require.Regexp(t, `id="open-letters"><a [^>]*>0<`, string(body), "shop_letters has none")
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(patience):
		t.Fatal("the console did not stop")
	}
}
