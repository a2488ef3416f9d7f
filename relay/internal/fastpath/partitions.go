package fastpath

import "slices"

// partitionSet is the partitions a subscription owns, and which of them
// it is giving back (it owns those until they are drained and released).
// Like queues, it does no I/O: a rebalance's outcome is applied to it.
type partitionSet struct {
	total     int          // the table's partitions
	owned     map[int]bool // leased to it, releasing ones included
	releasing map[int]bool // owned, given back once nothing of them is in flight
	minShare  int          // the fewest it should own, the group being what it is
}

func newPartitionSet(total int) *partitionSet {
	return &partitionSet{total: total, owned: map[int]bool{}, releasing: map[int]bool{}}
}

// kept is the owned partitions not being given back, in order.
func (ps *partitionSet) kept() []int {
	var parts []int
	for p := range ps.owned {
		if !ps.releasing[p] {
			parts = append(parts, p)
		}
	}
	slices.Sort(parts)
	return parts
}

// claimable is the partitions to claim rows of: nil when that is all of
// them; any is false when there is none.
func (ps *partitionSet) claimable() (parts []int, any bool) {
	parts = ps.kept()
	if len(parts) == ps.total {
		return nil, true
	}
	return parts, len(parts) > 0
}

// keeps tells whether rows of p may be held: it is owned and not being
// given back.
func (ps *partitionSet) keeps(p int) bool { return ps.owned[p] && !ps.releasing[p] }

// short tells whether it owns fewer than its share.
func (ps *partitionSet) short() bool { return len(ps.owned) < ps.minShare }

// settling tells whether partitions are changing hands: some are being
// given back, or it owns fewer than its share.
func (ps *partitionSet) settling() bool { return len(ps.releasing) > 0 || ps.short() }

// changes is what applying a rebalance changed.
type changes struct {
	lost    []int // owned, now another's: its lease ran out
	surplus []int // to give back, being more than the share
	gained  bool
}

// apply takes the outcome of a rebalance that gave back released.
func (ps *partitionSet) apply(own ownership, released []int) changes {
	var c changes
	for _, p := range released {
		delete(ps.releasing, p)
		delete(ps.owned, p)
	}
	now := map[int]bool{}
	for _, p := range own.owned {
		now[p] = true
	}
	for p := range ps.owned {
		if !now[p] {
			c.lost = append(c.lost, p)
			delete(ps.owned, p)
			delete(ps.releasing, p)
		}
	}
	slices.Sort(c.lost)
	if own.members > 0 {
		ps.minShare = ps.total / own.members
	}
	for p := range now {
		if !ps.owned[p] {
			ps.owned[p], c.gained = true, true
		}
	}
	if kept := ps.kept(); len(kept) > own.fair {
		for _, p := range kept[own.fair:] {
			ps.releasing[p] = true
			c.surplus = append(c.surplus, p)
		}
	}
	return c
}

// giveUpAll forgets every partition and returns those it owned.
func (ps *partitionSet) giveUpAll() []int {
	var all []int
	for p := range ps.owned {
		all = append(all, p)
	}
	slices.Sort(all)
	clear(ps.owned)
	clear(ps.releasing)
	return all
}

// drainedReleasing is the partitions being given back of which nothing is
// held in q any more: ready to be released.
func (ps *partitionSet) drainedReleasing(q *queues) []int {
	var out []int
	for p := range ps.releasing {
		if q.drained(p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}
