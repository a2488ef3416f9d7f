package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Each process of a run names its connections (application_name):
// "entoutbox relay N" for the Nth relay of a row, "entoutbox bench" for
// this one's pools (the loader and the in-process consumers). connWatch
// counts them in pg_stat_activity while the run lasts and keeps each
// name's peak: what a relay and a consumer instance hold, as
// docs/operations.md states them.
type connWatch struct {
	mu   sync.Mutex
	peak map[string]int
	stop context.CancelFunc
	done chan struct{}
}

const benchApplicationName = "entoutbox bench"

// withApplicationName returns rawURL naming its connections name (spaces
// escaped as pgx reads them: %20, never +).
func withApplicationName(rawURL, name string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL
	}
	q := u.Query()
	q.Del("application_name")
	u.RawQuery = q.Encode()
	if u.RawQuery != "" {
		u.RawQuery += "&"
	}
	u.RawQuery += "application_name=" + url.PathEscape(name)
	return u.String()
}

// watchConnections counts the connections of each entoutbox process every
// 200 ms, on admin, until stopped.
func watchConnections(admin *sql.DB) *connWatch {
	ctx, stop := context.WithCancel(context.Background())
	w := &connWatch{peak: map[string]int{}, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			w.sample(ctx, admin)
		}
	}()
	return w
}

func (w *connWatch) sample(ctx context.Context, admin *sql.DB) {
	rows, err := admin.QueryContext(ctx, `SELECT application_name, count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name LIKE 'entoutbox %' GROUP BY 1`)
	if err != nil {
		return
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var n int
		if rows.Scan(&name, &n) == nil {
			w.mu.Lock()
			w.peak[name] = max(w.peak[name], n)
			w.mu.Unlock()
		}
	}
}

// print writes one line: the peak of each process's connections, the
// relays' as the most any one relay held.
func (w *connWatch) print(out io.Writer) {
	w.stop()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	relay, relays := 0, 0
	var others []string
	for name, n := range w.peak {
		if strings.HasPrefix(name, "entoutbox relay ") {
			relay, relays = max(relay, n), relays+1
			continue
		}
		others = append(others, fmt.Sprintf("%s %d", name, n))
	}
	slices.Sort(others)
	line := "connections at peak, per process:"
	if relays > 0 {
		line += fmt.Sprintf(" a relay %d (the most of %d relay processes)", relay, relays)
	}
	if len(others) > 0 {
		if relays > 0 {
			line += ","
		}
		line += " " + strings.Join(others, ", ") + " (the loader and the in-process consumers)"
	}
	fmt.Fprintln(out, line)
}
