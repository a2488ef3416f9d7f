package listen

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// pgxConn is pgx's database/sql connection, known by its method:
// importing its package would register the driver in every binary that
// imports this one.
type pgxConn interface{ Conn() *pgx.Conn }

// listenOnce listens on one connection until it fails or ctx ends; heard
// tells a notification came on it. first runs once the LISTEN is in
// place, the first time only.
func (l *Listener) listenOnce(ctx context.Context, first func()) (heard bool, err error) {
	err = l.withConn(ctx, func(c *pgx.Conn) error {
		var schema string
		if err := c.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
			return err
		}
		if _, err := c.Exec(ctx, l.listenStatement()); err != nil {
			return err
		}
		l.missed() // what was notified before the LISTEN was in place
		l.pid.Store(c.PgConn().PID())
		defer l.pid.Store(0)
		if l.check.start() {
			first()
		}
		for {
			note, err := c.WaitForNotification(ctx)
			if err != nil {
				return err
			}
			heard = true
			if note.Channel == l.check.channel {
				l.check.arrived()
				continue
			}
			l.notified(Notification{Channel: note.Channel, Payload: note.Payload, Schema: schema})
		}
	})
	return heard, err
}

// listenStatement listens on every channel, the check's too.
func (l *Listener) listenStatement() string {
	var b strings.Builder
	for _, ch := range append(l.cfg.Channels[:len(l.cfg.Channels):len(l.cfg.Channels)], l.check.channel) {
		b.WriteString("LISTEN " + pgsql.QuoteIdent(ch) + "; ")
	}
	return b.String()
}

// withConn runs fn on a connection of the pool, or of its own made like
// the pool's (OwnConnection), and lets go of it after.
func (l *Listener) withConn(ctx context.Context, fn func(*pgx.Conn) error) error {
	if l.cfg.OwnConnection {
		cfg, err := l.connConfig(ctx)
		if err != nil {
			return err
		}
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return err
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = c.Close(cctx)
		}()
		return fn(c)
	}
	conn, err := l.cfg.DB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		sc, ok := dc.(pgxConn)
		if !ok {
			return ErrNotPgx
		}
		c := sc.Conn()
		defer func() {
			// Leave the pooled connection clean.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, _ = c.Exec(ctx, "UNLISTEN *")
		}()
		return fn(c)
	})
}

// connConfig is the configuration of the pool's connections.
func (l *Listener) connConfig(ctx context.Context) (*pgx.ConnConfig, error) {
	conn, err := l.cfg.DB.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var cfg *pgx.ConnConfig
	err = conn.Raw(func(dc any) error {
		sc, ok := dc.(pgxConn)
		if !ok {
			return ErrNotPgx
		}
		cfg = sc.Conn().Config().Copy()
		cfg.OnNotification = nil // the pool connection's: pgx sets this one's own
		if cfg.RuntimeParams["application_name"] == "" && l.cfg.ApplicationName != "" {
			// Named in pg_stat_activity, where it is one more than the pool.
			cfg.RuntimeParams["application_name"] = l.cfg.ApplicationName
		}
		return nil
	})
	return cfg, err
}
