// Package pgdial opens database/sql pools on PostgreSQL (the pgx driver)
// whose new connections wait for room on a busy server: a server at its
// max_connections refuses a connection with "too many clients" (SQLSTATE
// 53300) until another client lets one go, which is a wait, not a
// failure. The tests' pools and the entoutbox command's use it.
package pgdial

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/entoutbox/entoutbox/internal/backoff"
)

// Options say how long a connection waits for room, and who hears of it.
type Options struct {
	// MaxWait bounds the wait of one connection; 0 waits as long as the
	// context of the statement that needs it lives.
	MaxWait time.Duration
	// Waiting is told, once per connection that must wait, why.
	Waiting func(err error)
	// Connected is told when a connection that waited got through.
	Connected func(waited time.Duration)
	// ApplicationName, when the URL sets none, names the connections in
	// pg_stat_activity.
	ApplicationName string
}

// Open opens a pool on databaseURL whose connections wait for room on
// the server as opts say.
func Open(databaseURL string, opts Options) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parsing the database URL: %w", err)
	}
	if _, set := cfg.RuntimeParams["application_name"]; !set && opts.ApplicationName != "" {
		cfg.RuntimeParams["application_name"] = opts.ApplicationName
	}
	return sql.OpenDB(&connector{Connector: stdlib.GetConnector(*cfg), opts: opts}), nil
}

// TooManyClients tells whether err is the server's refusal of a
// connection because it has no room for another.
func TooManyClients(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "53300"
}

// The waits between tries: short at first (a test's neighbour lets go
// of its connections within moments), a second at most.
const (
	firstWait = 50 * time.Millisecond
	longWait  = time.Second
)

type connector struct {
	driver.Connector
	opts Options
}

// Connect connects, trying again while the server has no room.
func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	started := time.Now()
	for attempt := 1; ; attempt++ {
		conn, err := c.Connector.Connect(ctx)
		if err == nil || !TooManyClients(err) {
			if err == nil && attempt > 1 && c.opts.Connected != nil {
				c.opts.Connected(time.Since(started))
			}
			return conn, err
		}
		wait := backoff.Exponential(firstWait, longWait, attempt)
		if c.opts.MaxWait > 0 && time.Since(started)+wait > c.opts.MaxWait {
			return nil, fmt.Errorf("waited %s for room on the server: %w", time.Since(started).Round(time.Millisecond), err)
		}
		if attempt == 1 && c.opts.Waiting != nil {
			c.opts.Waiting(err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("waiting for room on the server: %w (%w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}
