package pgdial_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/pgdial"
	"github.com/entoutbox/entoutbox/internal/pgtest"
)

// fill holds connections to the server until it refuses one for want of
// room, and returns them.
func fill(t *testing.T, url string) []*sql.Conn {
	t.Helper()
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	db.SetMaxIdleConns(0) // a connection let go ends
	var held []*sql.Conn
	for {
		c, err := db.Conn(context.Background())
		if err != nil {
			require.True(t, pgdial.TooManyClients(err), "filling the server: %v", err)
			require.NotEmpty(t, held)
			return held
		}
		require.NoError(t, c.PingContext(context.Background()))
		held = append(held, c)
	}
}

// On a server at its max_connections, a connection waits until another
// client lets one go, then works; past MaxWait it fails, saying why.
func TestConnectWaitsForRoom(t *testing.T) {
	t.Parallel()
	p := pgtest.StartPrivate(t, "max_connections=5", "superuser_reserved_connections=0")
	held := fill(t, p.URL)

	waiting := make(chan error, 1)
	db, err := pgdial.Open(p.URL, pgdial.Options{MaxWait: 2 * time.Minute, Waiting: func(err error) { waiting <- err }})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	pinged := make(chan error, 1)
	go func() { pinged <- db.Ping() }()
	select {
	case err := <-waiting:
		require.True(t, pgdial.TooManyClients(err), "told to wait for %v", err)
	case err := <-pinged:
		t.Fatalf("connected to a full server without waiting: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("neither waited nor connected")
	}
	require.NoError(t, held[0].Close())
	select {
	case err := <-pinged:
		require.NoError(t, err, "connecting once a connection was let go")
	case <-time.After(2 * time.Minute):
		t.Fatal("still waiting after a connection was let go")
	}

	// The server is full again: a short wait ends in its refusal.
	short, err := pgdial.Open(p.URL, pgdial.Options{MaxWait: 300 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { short.Close() })
	err = short.Ping()
	require.Error(t, err)
	require.True(t, pgdial.TooManyClients(err), "%v", err)
	require.ErrorContains(t, err, "waited")
}
