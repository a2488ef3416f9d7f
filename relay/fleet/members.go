package fleet

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// MembersTable is the table of the fleet's processes in Config.Members:
// one row per process, its heartbeat renewed every MemberTimeout/5.
const MembersTable = outboxdb.FleetMembersTable

// DefaultMemberTimeout is how long a process of the fleet may go without
// a heartbeat before the others take its tenants.
const DefaultMemberTimeout = 10 * time.Second

// membership is this process's view of the fleet's processes: who is
// live, read from Config.Members at each heartbeat. Each tenant is
// relayed by the live member rendezvous hashing gives it (owner), so a
// member joining or leaving moves only the tenants it gains or loses.
//
// The view is for dividing the work, not for safety: two processes that
// both believe they own a tenant for a moment (their views differ by a
// heartbeat) run two relays on its database, which share its partitions
// through its own lease table as any two relays of one database do.
type membership struct {
	db      *sql.DB
	id      string
	timeout time.Duration
	logger  watermill.LoggerAdapter

	mu      sync.Mutex
	live    []string // sorted; this member's last successful read
	beatErr string   // the last failed heartbeat's error, "" after a good one
	changed chan struct{}
}

func newMembership(db *sql.DB, id string, timeout time.Duration, logger watermill.LoggerAdapter) *membership {
	return &membership{db: db, id: id, timeout: timeout, logger: logger, changed: make(chan struct{}, 1)}
}

// join makes the members table when it is missing, forgets members gone
// for long, and records this member's first heartbeat: an error means
// the fleet cannot share its work, and the process should not start.
func (m *membership) join(ctx context.Context) error {
	if err := outboxdb.JoinFleet(ctx, m.db); err != nil {
		return fmt.Errorf("fleet members: %w", err)
	}
	if err := m.beat(ctx); err != nil {
		return fmt.Errorf("fleet members: first heartbeat of %s: %w", m.id, err)
	}
	// Processes started together (a deploy) see each other after one
	// more heartbeat each: read the members again then, rather than
	// start every tenant here and hand most of them over a moment later.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(m.timeout / 5):
	}
	if err := m.beat(ctx); err != nil {
		return fmt.Errorf("fleet members: heartbeat of %s: %w", m.id, err)
	}
	return nil
}

// run renews this member's heartbeat every timeout/5 and reads the live
// members, until ctx ends. A failed heartbeat is logged and the last
// view kept: the members database is not in the path of any event, and a
// process cut off from it goes on relaying its tenants (see membership).
func (m *membership) run(ctx context.Context) {
	tick := time.NewTicker(m.timeout / 5)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		err := m.beat(ctx)
		if ctx.Err() != nil {
			return
		}
		m.recordBeat(err)
	}
}

func (m *membership) recordBeat(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		if m.beatErr != "" {
			m.logger.Info("Fleet heartbeat recorded again", watermill.LogFields{"member": m.id})
		}
		m.beatErr = ""
		return
	}
	if err.Error() != m.beatErr {
		m.logger.Error("Fleet heartbeat failed; relaying the tenants of the last view of the members", err,
			watermill.LogFields{"member": m.id, "members": len(m.live)})
	}
	m.beatErr = err.Error()
}

// beat records this member's heartbeat and reads the live members, by
// the database's clock: the processes' clocks need not agree.
func (m *membership) beat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	if err := outboxdb.FleetHeartbeat(ctx, m.db, m.id); err != nil {
		return err
	}
	live, err := outboxdb.LiveFleetMembers(ctx, m.db, m.timeout)
	if err != nil {
		return err
	}
	if !slices.Contains(live, m.id) {
		// Our row was just written: a clock jump or a statement slower
		// than the timeout. We are live all the same.
		live = append(live, m.id)
		slices.Sort(live)
	}
	m.setLive(live)
	return nil
}

func (m *membership) setLive(live []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if slices.Equal(live, m.live) {
		return
	}
	m.logger.Info("Fleet members changed", watermill.LogFields{"member": m.id, "members": len(live), "before": len(m.live)})
	m.live = live
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// leave removes this member's row, so that the others take its tenants at
// their next heartbeat rather than after the timeout.
func (m *membership) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	if err := outboxdb.LeaveFleet(ctx, m.db, m.id); err != nil {
		m.logger.Error("Fleet member not removed; the others take its tenants after the member timeout", err,
			watermill.LogFields{"member": m.id})
	}
}

// owner is the live member that relays tenant.
func (m *membership) owner(tenant string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return rendezvous(m.live, tenant)
}

// members is the live members of the last view.
func (m *membership) members() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.live)
}

// rendezvous is the member of members with the highest score for tenant
// (highest random weight hashing): every process that reads the same
// members picks the same one, and a member that joins or leaves moves
// only the tenants whose highest score it has.
func rendezvous(members []string, tenant string) string {
	var best string
	var bestScore uint64
	for _, m := range members {
		h := fnv.New64a()
		_, _ = h.Write([]byte(m))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(tenant))
		score := mix(h.Sum64())
		if best == "" || score > bestScore || score == bestScore && m < best {
			best, bestScore = m, score
		}
	}
	return best
}

// mix spreads FNV's bits (splitmix64's finalizer): FNV alone scores
// names that differ in their last byte too alike to spread the tenants.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// beat renews this member's heartbeat until the returned stop is called
// (or ctx ends); stop returns once the heartbeat has stopped.
func (f *Fleet) beat(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.members.run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// leave stops the heartbeat and removes this member, so that the others
// take its tenants at once: before its own relays stopped, since any two
// relays of one database share its partitions safely.
func (f *Fleet) leave(stopBeat func()) {
	stopBeat()
	f.members.leave()
}

// membersChanged is told when the live members changed; nil, never,
// without Config.Members.
func (f *Fleet) membersChanged() <-chan struct{} {
	if f.members == nil {
		return nil
	}
	return f.members.changed
}

// assign divides tenants between this process, which relays owned, and
// the other live members: elsewhere is the others' tenants, with their
// member.
func (f *Fleet) assign(tenants []Tenant) (owned []Tenant, elsewhere map[string]string) {
	elsewhere = map[string]string{}
	if f.members == nil {
		return tenants, elsewhere
	}
	for _, t := range tenants {
		if m := f.members.owner(t.Name); m != f.cfg.MemberID {
			elsewhere[t.Name] = m
			continue
		}
		owned = append(owned, t)
	}
	return owned, elsewhere
}

// defaultMemberID names a process by its host, its pid and a random
// suffix (a restarted container may get the same pid).
func defaultMemberID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "fleet"
	}
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(suffix))
}
