// Package sharing divides a topic's partitions among the live instances
// of a consumer name: each reads those its rank among the members gives
// it, so that while the members stay the same one aggregate's events
// reach one instance, which applies them as runs instead of waiting on
// the others. Membership is a row per member in the consumers' database,
// renewed every beat; a member that stops leaves, one that dies is
// dropped when its lease ends. Correctness never rests on it: the
// consumers' number check keeps each aggregate in order wherever its
// events go, so two members reading one partition for a moment, or none,
// costs speed, not order.
package sharing

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// Member is one member of a consumer name's group on a topic.
type Member struct {
	db                    dialect.ExecQuerier
	tables                outboxdb.Tables
	consumer, topic, name string
	lease                 time.Duration

	createOnce sync.Mutex
	created    bool
}

// NewMember returns the member name of consumer's group on topic; its
// lease, renewed by each Beat, lasts lease.
func NewMember(db dialect.ExecQuerier, tables outboxdb.Tables, consumer, topic, name string, lease time.Duration) *Member {
	return &Member{db: db, tables: tables, consumer: consumer, topic: topic, name: name, lease: lease}
}

// Name is the member's name.
func (m *Member) Name() string { return m.name }

// Beat renews the member's lease and returns the live members, itself
// included, sorted.
func (m *Member) Beat(ctx context.Context) ([]string, error) {
	if err := m.create(ctx); err != nil {
		return nil, err
	}
	var rows entsql.Rows
	if err := m.db.Query(ctx, m.tables.BeatQuery(), []any{m.consumer, m.topic, m.name, m.lease.Milliseconds()}, &rows); err != nil {
		return nil, fmt.Errorf("renewing the membership of %q on %q: %w", m.consumer, m.topic, err)
	}
	defer rows.Close()
	members := []string{m.name}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		members = append(members, name)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.Sort(members)
	return members, nil
}

// Leave ends the membership: the others take its partitions at their
// next beat.
func (m *Member) Leave(ctx context.Context) error {
	var res entsql.Result
	return m.db.Exec(ctx, m.tables.LeaveQuery(), []any{m.consumer, m.topic, m.name}, &res)
}

// create makes the members table once; a failure is tried again at the
// next beat. Members starting together may race on it: the loser's
// error is one failed beat.
func (m *Member) create(ctx context.Context) error {
	m.createOnce.Lock()
	defer m.createOnce.Unlock()
	if m.created {
		return nil
	}
	var err error
	// Twice: two members creating the table at once race in PostgreSQL's
	// catalog (CREATE TABLE IF NOT EXISTS is not atomic), and the loser
	// finds it made the second time.
	for range 2 {
		var res entsql.Result
		if err = m.db.Exec(ctx, m.tables.CreateMembersQuery(), []any{}, &res); err == nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("creating the consumer members table %q: %w", m.tables.ConsumerMembers(), err)
	}
	m.created = true
	return nil
}

// Share returns the partitions, out of n, that self reads among members
// (sorted, self included): those whose number modulo the number of
// members is self's rank. Every member computes the same division from
// the same list.
func Share(members []string, self string, n int) []int {
	rank := slices.Index(members, self)
	if rank < 0 || len(members) == 0 {
		return All(n)
	}
	var own []int
	for k := rank; k < n; k += len(members) {
		own = append(own, k)
	}
	return own
}

// All is every partition out of n: what a member reads while it cannot
// tell who the others are.
func All(n int) []int {
	all := make([]int, n)
	for k := range all {
		all[k] = k
	}
	return all
}
