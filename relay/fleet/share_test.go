package fleet_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/relay"
	"github.com/entoutbox/entoutbox/relay/fleet"
)

// publishedBy records which member published each event, then passes it
// on to the test's broker.
type publishedBy struct {
	message.Publisher
	member string
	log    *publishLog
}

type publishLog struct {
	mu sync.Mutex
	by map[string][]string // event id: the members that published it, in order
}

func (p publishedBy) Publish(topic string, msgs ...*message.Message) error {
	p.log.mu.Lock()
	for _, m := range msgs {
		p.log.by[m.UUID] = append(p.log.by[m.UUID], p.member)
	}
	p.log.mu.Unlock()
	return p.Publisher.Publish(topic, msgs...)
}

func (p publishedBy) Close() error { return nil } // the test's broker is closed by the test

// sharedFleet is the fleet's processes of a test, sharing one members table.
type sharedFleet struct {
	t       *testing.T
	file    string
	members *pgtest.DB
	pubsub  message.Publisher
	log     *publishLog
	fleets  map[string]*fleet.Fleet
	stops   map[string]func()
}

// join starts the fleet's process named id, until stopped or the test ends.
func (s *sharedFleet) join(id string) {
	t := s.t
	t.Helper()
	f, err := fleet.New(fleet.Config{File: s.file, Members: s.members.DB, MemberID: id, MemberTimeout: 2 * time.Second,
		Relay:  relay.Config{Publisher: publishedBy{Publisher: s.pubsub, member: id, log: s.log}, PollInterval: 100 * time.Millisecond},
		Reload: 100 * time.Millisecond, RetryInterval: 100 * time.Millisecond, MaxRetryInterval: time.Second, IdleAfter: -1,
		Logger: watermill.NopLogger{}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
		})
	}
	t.Cleanup(stop)
	s.fleets[id], s.stops[id] = f, stop
}

func (s *sharedFleet) leave(id string) {
	s.stops[id]()
	delete(s.fleets, id)
}

// settled waits until every live process agrees who relays each tenant,
// each tenant relayed (running) by exactly one of them, and returns the
// owners.
func (s *sharedFleet) settled(tenants []string) map[string]string {
	t := s.t
	t.Helper()
	var owners map[string]string
	require.Eventually(t, func() bool {
		owners = map[string]string{}
		for _, tn := range tenants {
			running, agreed := "", ""
			for id, f := range s.fleets {
				st, listed := tenantState(f, tn)
				if !listed {
					return false
				}
				if st.State == fleet.StateRunning && st.Member == id {
					if running != "" {
						return false
					}
					running = id
				}
				if st.State != fleet.StateElsewhere && st.State != fleet.StateRunning {
					return false
				}
				if agreed != "" && st.Member != agreed {
					return false
				}
				agreed = st.Member
			}
			if running == "" || running != agreed {
				return false
			}
			owners[tn] = running
		}
		return true
	}, patience, 50*time.Millisecond, "the processes agree on one running relay per tenant")
	return owners
}

// requireOwnersPublished checks that each event of want was published by
// its tenant's owner alone.
func (s *sharedFleet) requireOwnersPublished(owner string, want map[string][]string) {
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	for _, ids := range want {
		for _, id := range ids {
			require.Equal(s.t, []string{owner}, s.log.by[id], "event %s published by its tenant's relaying process alone", id)
		}
	}
}

// Processes given the same file and members database divide the tenants:
// each tenant relayed by one process; a process joining takes some, one
// leaving hands its own over; every event arrives once, in its aggregate's
// order, published by the process that relays its tenant.
func TestFleetProcessesShareTheTenants(t *testing.T) {
	t.Parallel()
	names := []string{"acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "tyrell", "cyberdyne"}
	dbs := map[string]*tenantDB{}
	var entries []fleet.Tenant
	for _, n := range names {
		dbs[n] = newTenantDB(t, true)
		entries = append(entries, dbs[n].bySchema(n))
	}
	file := filepath.Join(t.TempDir(), "databases.json")
	writeFile(t, file, entries...)
	pubsub, got := receive(t)
	s := &sharedFleet{t: t, file: file, members: pgtest.New(t), pubsub: pubsub, log: &publishLog{by: map[string][]string{}},
		fleets: map[string]*fleet.Fleet{}, stops: map[string]func(){}}

	want := map[string]map[string][]string{}
	round := func(owners map[string]string) {
		for _, n := range names {
			more := dbs[n].emit(t, n, 6, 2)
			got.waitFor(t, more)
			s.requireOwnersPublished(owners[n], more)
			if want[n] == nil {
				want[n] = map[string][]string{}
			}
			for agg, ids := range more {
				want[n][agg] = append(want[n][agg], ids...)
			}
		}
	}
	s.join("member-a")
	s.join("member-b")
	owners := s.settled(names)
	requireSpread(t, owners, "member-a", "member-b")
	round(owners)

	s.join("member-c")
	owners = s.settled(names)
	requireSpread(t, owners, "member-a", "member-b", "member-c")
	round(owners)

	s.leave("member-a")
	owners = s.settled(names)
	requireSpread(t, owners, "member-b", "member-c")
	round(owners)

	time.Sleep(time.Second) // room for a duplicate to show
	for _, n := range names {
		got.requireExactly(t, n, want[n], false)
	}
}

// requireSpread checks each of members relays at least one tenant, and
// no other process does.
func requireSpread(t *testing.T, owners map[string]string, members ...string) {
	t.Helper()
	count := map[string]int{}
	for _, m := range owners {
		count[m]++
	}
	for _, m := range members {
		require.Positive(t, count[m], "member %s relays a share of the tenants: %v", m, owners)
	}
	require.Len(t, count, len(members), "only the live members relay: %v", owners)
}
