package pollpath

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// partitionLeases is MySQL's leaser: the rows are divided into partitions
// by their aggregate, and the relays that share the outbox lease each its
// share of them, the partitions over the live relays (the members table).
// A relay that joins takes the partitions free or whose lease ran out
// (SKIP LOCKED: relays taking at once take different ones); one that
// holds more than its share gives the rest back between terms, once
// nothing of them is in flight, and the newcomer takes them.
type partitionLeases struct {
	db     *sql.DB
	bound  outboxdb.SQLQuerier
	tables outboxdb.Tables
	relay  string
	total  int
	clock  *leaseClock

	mu      sync.Mutex
	held    []int // in order
	members int   // live relays at the last renewal, itself included
}

func (p *partitionLeases) create(ctx context.Context) error {
	all := make([]int, p.total)
	for i := range all {
		all[i] = i
	}
	list, _ := json.Marshal(all)
	for _, step := range []struct {
		what, sql string
		args      []any
	}{
		{"the lease table " + p.tables.PollLease(), outboxdb.PollLeaseCreate.SQL(p.tables), nil},
		{"the partitions of " + p.tables.PollLease(), outboxdb.PollPartitionsSeed.SQL(p.tables), []any{string(list)}},
		{"the members table " + p.tables.PollMembers(), outboxdb.PollMembersCreate.SQL(p.tables), nil},
	} {
		if _, err := p.bound.ExecContext(ctx, step.sql, step.args...); err != nil {
			return fmt.Errorf("relay: creating %s: %w", step.what, err)
		}
	}
	return nil
}

func (p *partitionLeases) acquire(ctx context.Context) (bool, error) {
	began := time.Now()
	held, share, err := p.renewHeld(ctx)
	if err != nil {
		return false, err
	}
	taken, err := p.take(ctx, share-len(held))
	if err != nil {
		return false, err
	}
	held = append(held, taken...)
	slices.Sort(held)
	p.mu.Lock()
	p.held = held
	p.mu.Unlock()
	if len(held) == 0 {
		return false, nil
	}
	p.clock.renewed(began)
	return true, nil
}

func (p *partitionLeases) renew(ctx context.Context) (bool, error) {
	began := time.Now()
	held, share, err := p.renewHeld(ctx)
	if err != nil {
		return true, err
	}
	p.mu.Lock()
	before := p.held
	p.mu.Unlock()
	for _, part := range before {
		if !slices.Contains(held, part) {
			return false, nil // another relay's now: the term ends
		}
	}
	p.clock.renewed(began)
	if len(held) > share {
		return false, nil // the surplus goes back between terms
	}
	taken, err := p.take(ctx, share-len(held))
	if len(taken) > 0 { // read from the next page on, nothing of them being known
		p.mu.Lock()
		p.held = append(p.held, taken...)
		slices.Sort(p.held)
		p.mu.Unlock()
	}
	return true, err
}

// renewHeld says the relay is live, renews the partitions it holds and
// reads them, with its share.
func (p *partitionLeases) renewHeld(ctx context.Context) (held []int, share int, err error) {
	lease := leaseFor.Milliseconds()
	if _, err := p.bound.ExecContext(ctx, outboxdb.PollMemberBeat.SQL(p.tables), p.relay, lease); err != nil {
		return nil, 0, err
	}
	var members int
	if err := p.bound.QueryRowContext(ctx, outboxdb.PollMembersLive.SQL(p.tables)).Scan(&members); err != nil {
		return nil, 0, err
	}
	if err := p.exec(ctx, outboxdb.PollPartitionsRenew, p.relay, lease); err != nil {
		return nil, 0, err
	}
	held, err = p.readHeld(ctx)
	if err != nil {
		return nil, 0, err
	}
	members = max(members, 1)
	p.mu.Lock()
	p.members = members
	p.mu.Unlock()
	return held, (p.total + members - 1) / members, nil
}

func (p *partitionLeases) readHeld(ctx context.Context) ([]int, error) {
	rows, err := p.bound.QueryContext(ctx, outboxdb.PollPartitionsHeld.SQL(p.tables), p.relay)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var held []int
	for rows.Next() {
		var part int
		if err := rows.Scan(&part); err != nil {
			return nil, err
		}
		held = append(held, part)
	}
	return held, rows.Err()
}

// take leases up to n free partitions (or whose lease ran out) to the
// relay, in one transaction.
func (p *partitionLeases) take(ctx context.Context, n int) ([]int, error) {
	if n <= 0 {
		return nil, nil
	}
	var free []int
	err := p.write(ctx, func(q outboxdb.SQLQuerier) error {
		rows, err := q.QueryContext(ctx, outboxdb.PollPartitionsFree.SQL(p.tables), n)
		if err != nil {
			return err
		}
		for rows.Next() {
			var part int
			if err := rows.Scan(&part); err != nil {
				rows.Close()
				return err
			}
			free = append(free, part)
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(free) == 0 {
			return err
		}
		_, err = q.ExecContext(ctx, outboxdb.PollPartitionsTake.SQL(p.tables), list(free), p.relay, leaseFor.Milliseconds())
		return err
	})
	if err != nil {
		return nil, err
	}
	return free, nil
}

// write runs do in a transaction under READ COMMITTED: see
// outboxdb.PollPartitionsTake.
func (p *partitionLeases) write(ctx context.Context, do func(q outboxdb.SQLQuerier) error) error {
	tx, err := p.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := do(outboxdb.BoundSQL(tx, outboxdb.MySQL)); err != nil {
		return err
	}
	return tx.Commit()
}

// exec runs one statement as write does.
func (p *partitionLeases) exec(ctx context.Context, stmt *outboxdb.Statement, args ...any) error {
	return p.write(ctx, func(q outboxdb.SQLQuerier) error {
		_, err := q.ExecContext(ctx, stmt.SQL(p.tables), args...)
		return err
	})
}

// list is parts as a comma-separated list.
func list(parts []int) string {
	s := make([]string, len(parts))
	for i, part := range parts {
		s[i] = strconv.Itoa(part)
	}
	return strings.Join(s, ",")
}

func (p *partitionLeases) handBack(ctx context.Context) error {
	p.mu.Lock()
	share := (p.total + p.members - 1) / max(p.members, 1)
	if len(p.held) <= share {
		p.mu.Unlock()
		return nil
	}
	surplus := slices.Clone(p.held[share:])
	p.mu.Unlock()
	if err := p.exec(ctx, outboxdb.PollPartitionsGive, p.relay, list(surplus)); err != nil {
		return err
	}
	p.mu.Lock()
	p.held = p.held[:share]
	p.mu.Unlock()
	return nil
}

func (p *partitionLeases) release(ctx context.Context) {
	_ = p.exec(ctx, outboxdb.PollPartitionsGiveAll, p.relay)
	_, _ = p.bound.ExecContext(ctx, outboxdb.PollMemberLeave.SQL(p.tables), p.relay)
}

func (p *partitionLeases) filter() (*outboxdb.Statement, []any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.held) == p.total {
		return outboxdb.PollPending, nil
	}
	return outboxdb.PollPendingIn, []any{p.total, list(p.held)}
}

func (p *partitionLeases) describe() map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	return map[string]any{"partitions": fmt.Sprintf("%d of %d", len(p.held), p.total), "relays": p.members}
}
