// Command busy makes a PostgreSQL server busy as other programs would, and
// measures what the tests take of it: it holds -hold idle connections, and
// every -every counts the server's connections (pg_stat_activity), printing
// the peak when it is stopped (SIGINT, SIGTERM). .ci/busy runs the short
// suite under it.
//
//	go run ./internal/pgtest/busy -hold 50 -every 200ms
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/entoutbox/entoutbox/internal/pgtest"
)

func main() {
	url := flag.String("database-url", pgtest.ServerURL(), "PostgreSQL URL (env DATABASE_URL)")
	hold := flag.Int("hold", 50, "idle connections to hold")
	every := flag.Duration("every", 200*time.Millisecond, "how often to count the server's connections")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *url, *hold, *every); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, url string, hold int, every time.Duration) error {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return fmt.Errorf("opening the database: %w", err)
	}
	defer db.Close()
	// The held connections, and one more to count with.
	db.SetMaxOpenConns(hold + 1)
	db.SetMaxIdleConns(hold + 1)
	held := make([]*sql.Conn, 0, hold)
	for range hold {
		c, err := db.Conn(ctx)
		if err != nil {
			return fmt.Errorf("holding connection %d: %w", len(held)+1, err)
		}
		held = append(held, c)
	}
	defer func() {
		for _, c := range held {
			_ = c.Close()
		}
	}()
	counter, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("opening the counting connection: %w", err)
	}
	defer counter.Close()
	var max, total int
	if err := counter.QueryRowContext(ctx, `SELECT current_setting('max_connections')::int`).Scan(&max); err != nil {
		return fmt.Errorf("reading max_connections: %w", err)
	}
	fmt.Printf("holding %d idle connections of max_connections %d; counting every %s\n", hold, max, every)
	var peak, samples int
	peakAt := time.Now()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Printf("peak: %d connections besides the %d held (and this counter's), at %s; %d samples\n",
				peak, hold, peakAt.UTC().Format(time.TimeOnly), samples)
			return nil
		case <-t.C:
		}
		// Client backends only: not the server's own processes, nor the
		// WAL senders' (replication connections count apart).
		err := counter.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'`).Scan(&total)
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			return fmt.Errorf("counting connections: %w", err)
		}
		samples++
		if n := total - hold - 1; n > peak {
			peak, peakAt = n, time.Now()
		}
	}
}
