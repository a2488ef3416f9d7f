// Package lag reads how far each consumer name is behind on each topic:
// the numbered events it has not handled yet, and how long the oldest of
// them has waited. Package metrics samples it for the lag gauges; package
// admin reads it for status and the console.
package lag

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/schema"
)

// Config names the tables; the schema package's defaults when empty.
type Config struct {
	Outbox, Sequences, Positions string
	// MaxRows bounds the outbox rows one read walks to locate the events
	// behind; DefaultMaxRows when zero.
	MaxRows int
}

// tables names cfg's tables for their statements in dialect d.
func (cfg Config) tables(d outboxdb.Dialect) outboxdb.Tables {
	return outboxdb.Tables{Outbox: cfg.Outbox, Sequences: cfg.Sequences, Positions: cfg.Positions, Dialect: d}
}

// DefaultMaxRows is Config.MaxRows' default.
const DefaultMaxRows = 100_000

// Lag is how far one consumer name is behind on one topic.
type Lag struct {
	Consumer, Topic string
	// Events counts the topic's numbered events the consumer has not
	// handled: per aggregate, the number of its last event less the
	// consumer's position (all of them where it has none). It includes
	// events the relay has not sent yet.
	Events int64
	// Located counts those of them found in the outbox, and Oldest is
	// when the oldest of those was written (zero when none was found).
	// When Located < Events, the others' rows are gone (a relay with
	// --delete-delivered, cleanup --delivered-retention, a relay dead
	// letter) or older than the rows walked: Oldest is then only an upper
	// bound of the oldest's time, and its age a lower bound.
	Located int64
	Oldest  time.Time
}

// Reading is the lag of every consumer name with positions, on every topic
// it has positions on that this database numbers, by consumer and topic.
type Reading struct {
	At   time.Time // the database's time of the read
	Lags []Lag
}

// Read reads the lag in one snapshot, on PostgreSQL or MySQL. A database
// without the positions or the sequences table has none.
//
// The count reads every counter and position once (two sequential scans,
// no join): per consumer and topic, the sum of the topic's counters less
// the sum of the consumer's positions, which is the per-aggregate
// difference summed as long as every position is on an aggregate this
// database numbers (it cannot be ahead of the counter). Its cost grows
// with the number of aggregates, not with the lag; no index can serve it
// without one holding last_seq, which every Emit and every handled event
// would then have to rewrite.
//
// The oldest is located by walking the outbox from its newest row back, in
// growing chunks, probing each row of a topic behind against the
// consumer's position (the positions' unique key), until every event
// behind is found, the table's first row is reached or MaxRows rows are
// read. When nothing is behind, nothing is walked.
func Read(ctx context.Context, db *sql.DB, cfg Config) (Reading, error) {
	if cfg.Outbox == "" {
		cfg.Outbox = schema.OutboxTable
	}
	if cfg.Sequences == "" {
		cfg.Sequences = schema.AggregateSequenceTable
	}
	if cfg.Positions == "" {
		cfg.Positions = schema.ConsumerPositionTable
	}
	if cfg.MaxRows <= 0 {
		cfg.MaxRows = DefaultMaxRows
	}
	d := outboxdb.DialectOfDB(db)
	if d == outboxdb.SQLite {
		return Reading{}, errors.New("lag: the consumers' lag is read on PostgreSQL and MySQL; on SQLite not yet")
	}
	t := cfg.tables(d)
	sqlTx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return Reading{}, fmt.Errorf("lag: %w", err)
	}
	defer sqlTx.Rollback() //nolint:errcheck // read only
	tx := outboxdb.BoundSQL(sqlTx, d)
	var (
		r      Reading
		tables bool
	)
	if err := tx.QueryRowContext(ctx, outboxdb.LagTables.SQL(t),
		t.TableArg(cfg.Sequences), t.TableArg(cfg.Positions)).Scan(&r.At, &tables); err != nil {
		return Reading{}, fmt.Errorf("lag: %w", err)
	}
	r.Lags = []Lag{}
	if !tables {
		return r, nil
	}
	// JIT compiling these scans costs more than it saves (seen: 0.7 s of
	// a 2 s read on 200k aggregates).
	if d == outboxdb.Postgres {
		if _, err := tx.ExecContext(ctx, `SET LOCAL jit = off`); err != nil {
			return Reading{}, fmt.Errorf("lag: %w", err)
		}
	}
	if r.Lags, err = count(ctx, tx, t); err != nil {
		return Reading{}, err
	}
	if err := locate(ctx, tx, t, cfg.MaxRows, r.Lags); err != nil {
		return Reading{}, err
	}
	return r, nil
}

func count(ctx context.Context, tx outboxdb.SQLQuerier, t outboxdb.Tables) ([]Lag, error) {
	rows, err := tx.QueryContext(ctx, outboxdb.LagCount.SQL(t))
	if err != nil {
		return nil, fmt.Errorf("lag: counting the events behind: %w", err)
	}
	defer rows.Close()
	lags := []Lag{}
	for rows.Next() {
		var l Lag
		if err := rows.Scan(&l.Consumer, &l.Topic, &l.Events); err != nil {
			return nil, fmt.Errorf("lag: counting the events behind: %w", err)
		}
		lags = append(lags, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lag: counting the events behind: %w", err)
	}
	return lags, nil
}

// firstChunk is how many outbox rows the walk reads first; each next
// chunk is twice the last. A consumer keeping up is found in the first.
const firstChunk = 1000

// locate fills Located and Oldest of lags.
func locate(ctx context.Context, tx outboxdb.SQLQuerier, t outboxdb.Tables, maxRows int, lags []Lag) error {
	type key struct{ consumer, topic string }
	behind := map[key]*Lag{}
	for i := range lags {
		if lags[i].Events > 0 {
			behind[key{lags[i].Consumer, lags[i].Topic}] = &lags[i]
		}
	}
	bounds, find := outboxdb.LagWalkBounds.SQL(t), outboxdb.LagLocate.SQL(t)
	below, chunk, walked := int64(math.MaxInt64), firstChunk, 0
	for len(behind) > 0 && walked < maxRows {
		want := min(chunk, maxRows-walked)
		var (
			low int64
			n   int
		)
		if err := tx.QueryRowContext(ctx, bounds, below, want).Scan(&low, &n); err != nil {
			return fmt.Errorf("lag: walking the outbox: %w", err)
		}
		if n == 0 {
			break
		}
		consumers, topics := make([]string, 0, len(behind)), make([]string, 0, len(behind))
		pairs := make([][2]string, 0, len(behind)) // MySQL's form reads them as one JSON array
		for k := range behind {
			consumers, topics = append(consumers, k.consumer), append(topics, k.topic)
			pairs = append(pairs, [2]string{k.consumer, k.topic})
		}
		args := []any{low, below, consumers, topics}
		if t.Dialect == outboxdb.MySQL {
			js, err := json.Marshal(pairs)
			if err != nil {
				return fmt.Errorf("lag: %w", err)
			}
			args = []any{low, below, string(js)}
		}
		rows, err := tx.QueryContext(ctx, find, args...)
		if err != nil {
			return fmt.Errorf("lag: locating the events behind: %w", err)
		}
		for rows.Next() {
			var (
				k      key
				found  int64
				oldest time.Time
			)
			if err := rows.Scan(&k.consumer, &k.topic, &found, &oldest); err != nil {
				rows.Close()
				return fmt.Errorf("lag: locating the events behind: %w", err)
			}
			l := behind[k]
			l.Located += found
			if l.Oldest.IsZero() || oldest.Before(l.Oldest) {
				l.Oldest = oldest
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("lag: locating the events behind: %w", err)
		}
		for k, l := range behind {
			if l.Located >= l.Events {
				delete(behind, k)
			}
		}
		walked += n
		if n < want {
			break // the table's first row
		}
		below, chunk = low, chunk*2
	}
	return nil
}
