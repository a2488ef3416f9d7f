package fastpath

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/google/uuid"
)

// A subscription owns partitions of its topic under leases that it renews
// by rebalancing, about every second and at once when the group changes
// (a relay joins or leaves, partitions are given back). A rebalance is a
// cycle of named steps, each a function below:
//
//	startRebalance    the run loop starts it beside itself (one at a time)
//	rebalance         beside the loop: the liveness lock, then store.rebalance
//	rebalanceDone     back in the loop: the outcome, and the next one scheduled
//	applyRebalance    a stale outcome is dropped; otherwise
//	  renewFailed     the leases may run out: after two thirds of them, all is given up
//	  renewSucceeded  the leases run on from when the rebalance began
//	  apply           partitions lost, gained or to give back
//
// store.rebalance is one transaction under the ownership lock, its own
// steps being the methods of ownerTx.

// startRebalance starts a rebalance beside the loop, or asks for another
// when one runs.
func (sub *Subscription) startRebalance() {
	if sub.rebalancing {
		sub.rebalanceAgain = true
		return
	}
	sub.rebalancing = true
	req := rebalanceRequest{epoch: sub.epoch, release: sub.parts.drainedReleasing(sub.q)}
	go func() { sub.rebalanced <- sub.rebalance(sub.ctx, req) }()
}

// scheduleRebalance sets when the next rebalance starts: often while
// partitions change hands, so that a relay that joins or leaves is given
// its share within moments.
func (sub *Subscription) scheduleRebalance() {
	every := sub.rebalanceEvery
	if sub.parts.settling() || sub.renewFailing || sub.rebalanceAgain {
		every = min(every, 100*time.Millisecond)
	}
	sub.rebalanceAgain = false
	sub.rebalanceT.Reset(every)
}

// rebalanceRequest is what a rebalance starts from: the partitions being
// given back that are drained, and the epoch it belongs to.
type rebalanceRequest struct {
	release []int
	epoch   int
}

// rebalanceResult is what a rebalance came to.
type rebalanceResult struct {
	req     rebalanceRequest
	own     ownership
	err     error
	started time.Time // the leases it renews run from then
}

// rebalance renews the subscription's partitions, gives back those of req,
// and takes its share of the free ones. It runs beside the run loop and
// touches none of its state.
func (sub *Subscription) rebalance(ctx context.Context, req rebalanceRequest) rebalanceResult {
	s := sub.s
	if s.Hooks.Renew != nil {
		if err := s.Hooks.Renew(ctx); err != nil {
			return rebalanceResult{req: req, err: err, started: time.Now()}
		}
	}
	res := rebalanceResult{req: req, started: time.Now()}
	// Bounded, so that a database that hangs cannot delay the decision to
	// give the partitions up.
	rctx, cancel := context.WithTimeout(ctx, s.cfg.Lease/3)
	defer cancel()
	res.err = sub.live.ensure(rctx)
	if res.err == nil {
		res.own, res.err = s.store.rebalance(rctx, sub.topic, sub.holder, req.release, &sub.dead)
	}
	return res
}

// rebalanceDone takes the outcome of a rebalance, and schedules the next.
func (sub *Subscription) rebalanceDone(r rebalanceResult) {
	sub.rebalancing = false
	if r.err != nil && sub.ctx.Err() == nil {
		sub.metrics.LeaseRenewalFailed()
	}
	if sub.applyRebalance(r) {
		sub.wantClaim = true
	}
	sub.scheduleRebalance()
	sub.publishState()
}

// applyRebalance applies the outcome of a rebalance. It reports whether the
// subscription gained partitions.
func (sub *Subscription) applyRebalance(r rebalanceResult) bool {
	switch {
	case r.req.epoch != sub.epoch:
		// It began before the subscription gave everything up: what it
		// says it owns may be out of date. The next one tells.
		return false
	case r.err != nil:
		sub.renewFailed(r.err)
		return false
	}
	sub.renewSucceeded(r)
	return sub.apply(r.own, r.req.release)
}

// renewFailed handles a rebalance that failed: the partitions are kept
// while their leases surely run, and given up before another relay may
// take them.
func (sub *Subscription) renewFailed(err error) {
	s := sub.s
	if errors.Is(err, errLiveLockTaken) && len(sub.parts.owned) == 0 {
		sub.rename()
	}
	if sub.ctx.Err() == nil && !sub.renewFailing {
		s.cfg.Logger.Error("Renewing the partitions failed; trying again, they are kept until their lease ends", err, nil)
	}
	sub.renewFailing = true
	// Stop sending well before the leases may have ended and another
	// relay taken the partitions: two relays must never send the rows
	// of one aggregate. (maySend already stops every send then; failed
	// renewals are tried again every 100 ms.)
	if len(sub.parts.owned) > 0 && time.Since(sub.renewed) > s.cfg.Lease*2/3 {
		s.cfg.Logger.Error("Partitions not renewed for most of their lease; giving them up", nil,
			watermill.LogFields{"relay": sub.holder})
		sub.giveUpAll()
	}
}

// renewSucceeded takes a rebalance that succeeded: what it took over and waits
// for is logged, and the leases run from when it began.
func (sub *Subscription) renewSucceeded(r rebalanceResult) {
	s := sub.s
	for _, h := range r.own.takenOver {
		s.cfg.Logger.Info("Took over the partitions of a relay whose connection is gone", watermill.LogFields{
			"relay": sub.holder, "dead_relay": h})
	}
	sub.sayWaiting(r.own)
	if sub.renewFailing {
		s.cfg.Logger.Info("Partitions renewed again", watermill.LogFields{"relay": sub.holder})
		sub.renewFailing = false
	}
	sub.renewedAt(r.started)
}

// rename joins again under a new name: its earlier session still holds the
// liveness lock on the server, which has not noticed it is gone. The old
// name's partitions are freed at once (nothing sends under it: the
// subscription gave everything up when it lost the session).
func (sub *Subscription) rename() {
	s := sub.s
	old := sub.holder
	sub.holder = fmt.Sprintf("%s/%s/%d", s.cfg.RelayID, uuid.NewString()[:8], s.nextSeq())
	sub.live = s.newLiveness(sub.holder)
	s.cfg.Logger.Info("Joining again under a new name: the liveness lock of the old one is held by its lost session",
		watermill.LogFields{"relay": sub.holder, "was": old})
	if err := s.store.leave(sub.ctx, sub.topic, old); err != nil {
		s.cfg.Logger.Error("Freeing the partitions of the old name failed; they are free when its lease ends", err,
			watermill.LogFields{"relay": sub.holder, "was": old})
	}
}

// apply takes the outcome of a rebalance that gave back released, and
// drops what it holds of the partitions it lost or gives back.
func (sub *Subscription) apply(own ownership, released []int) bool {
	c := sub.parts.apply(own, released)
	if len(c.lost) > 0 {
		sub.losses.Add(1)
	}
	for _, p := range c.lost {
		// Its lease ran out and another relay took it: stop sending its rows.
		sub.s.cfg.Logger.Error("Lost a partition to another relay after its lease ran out", nil,
			watermill.LogFields{"partition": p, "relay": sub.holder})
		sub.q.drop(p)
	}
	for _, p := range c.surplus {
		sub.q.drop(p)
	}
	if c.gained {
		sub.rescan = true // the new partitions' rows may lie anywhere
	}
	return c.gained
}

// lostLiveness runs when the session holding its liveness lock is gone,
// and with it the lock the others read: they may take its partitions
// within moments. It stops at once.
func (sub *Subscription) lostLiveness() {
	sub.s.cfg.Logger.Error("Lost the connection holding the relay's liveness lock; giving the partitions up", nil,
		watermill.LogFields{"relay": sub.holder})
	sub.giveUpAll()
	sub.live.forget()
	sub.rebalanceT.Reset(100 * time.Millisecond)
	sub.publishState()
}

// giveUpAll forgets every partition and all that was claimed of them; a
// rebalance already under way is then disregarded.
func (sub *Subscription) giveUpAll() {
	sub.epoch++
	sub.losses.Add(1)
	for _, p := range sub.parts.giveUpAll() {
		sub.q.drop(p)
	}
}

// sayWaiting logs, once per change, who holds the partitions a
// subscription short of its share waits for, so that an operator sees why
// delivery of their events waits.
func (sub *Subscription) sayWaiting(own ownership) {
	var b strings.Builder
	for _, h := range own.waitingOn {
		fmt.Fprintf(&b, "%s:%d;", h.relay, h.partitions)
	}
	if b.String() == sub.waitingOn {
		return
	}
	sub.waitingOn = b.String()
	for _, h := range own.waitingOn {
		why := "its lease runs until " + h.until.Format(time.RFC3339)
		if !h.live {
			why = "it is not running (its liveness lock is not held): taken over within seconds; if it is a relay of an " +
				"earlier version, which holds no lock, when its lease ends at " + h.until.Format(time.RFC3339)
		}
		sub.s.cfg.Logger.Info("Waiting for partitions another relay holds; their events wait meanwhile", watermill.LogFields{
			"relay": sub.holder, "held_by": h.relay, "partitions": h.partitions, "why": why})
	}
}

// ownership is what a rebalance leaves a subscription with.
type ownership struct {
	owned   []int // partitions leased to it, renewed
	fair    int   // its share: how many it may own at most
	members int   // subscriptions in the group, itself included
	// takenOver is the holders found dead (their session gone) whose
	// partitions were freed.
	takenOver []string
	// waitingOn is, when it owns less than its share, who holds the
	// partitions it waits for.
	waitingOn []heldBy
}

// heldBy is partitions held by another subscription.
type heldBy struct {
	relay      string
	partitions int
	until      time.Time // when its lease ends, unless renewed
	live       bool      // its session holds its liveness lock
}

// rebalance keeps holder alive as a member of topic's group, gives back
// the partitions in release (drained by the caller), renews the leases of
// the others it owns and takes free or expired partitions up to its fair
// share. A holder owning more than its share is told so by fair and
// releases the surplus once drained.
func (s *store) rebalance(ctx context.Context, topic, holder string, release []int, dead *deadHolders) (ownership, error) {
	if err := s.init(ctx); err != nil {
		return ownership{}, fmt.Errorf("creating the partition tables: %w", err)
	}
	var out ownership
	err := s.inOwnerLock(ctx, func(tx *sql.Tx) error {
		g := ownerTx{ctx: ctx, tx: tx, s: s, topic: topic, holder: holder}
		if err := g.ensurePartitions(); err != nil {
			return err
		}
		joined, err := g.join()
		if err != nil {
			return err
		}
		expired, err := g.dropExpired()
		if err != nil {
			return err
		}
		if out.takenOver, err = g.takeOverDead(dead); err != nil {
			return err
		}
		// The others hear of a change at once, not at their next rebalance:
		// a relay joining gets its share, and what is given back is taken.
		if joined || expired > 0 || len(release) > 0 || len(out.takenOver) > 0 {
			if err := s.notifyRebalance(ctx, tx); err != nil {
				return err
			}
		}
		if err := g.release(release); err != nil {
			return err
		}
		owned, err := g.renew()
		if err != nil {
			return err
		}
		if out.members, out.fair, err = g.share(); err != nil {
			return err
		}
		if want := out.fair - len(owned); want > 0 {
			taken, err := g.takeFree(want)
			if err != nil {
				return err
			}
			owned = append(owned, taken...)
		}
		out.owned = owned
		if len(owned) < out.fair {
			if out.waitingOn, err = g.holders(); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// leave gives back every partition holder owns and ends its membership.
func (s *store) leave(ctx context.Context, topic, holder string) error {
	return s.inOwnerLock(ctx, func(tx *sql.Tx) error {
		g := ownerTx{ctx: ctx, tx: tx, s: s, topic: topic, holder: holder}
		if err := g.free([]string{holder}); err != nil {
			return err
		}
		return s.notifyRebalance(ctx, tx)
	})
}

// notifyRebalance tells every relay of the table, when tx commits, that
// partitions change hands.
func (s *store) notifyRebalance(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, `SELECT pg_notify($1, '')`, rebalanceChannel(s.cfg.Table))
	return err
}

// ownerTx is a change of ownership in topic's group on behalf of holder,
// inside the ownership lock's transaction: each method is one step of it.
type ownerTx struct {
	ctx    context.Context
	tx     *sql.Tx
	s      *store
	topic  string
	holder string
}

func (g ownerTx) lease() int64 { return g.s.cfg.Lease.Milliseconds() }

// ensurePartitions creates the topic's partitions on its first use, and
// refuses a table whose relays disagree on their number.
func (g ownerTx) ensurePartitions() error {
	var count int
	if err := g.tx.QueryRowContext(g.ctx, g.s.sql.CountPartitions, g.topic).Scan(&count); err != nil {
		return err
	}
	switch count {
	case 0:
		_, err := g.tx.ExecContext(g.ctx, g.s.sql.AddPartitions, g.topic, g.s.cfg.Partitions)
		return err
	case g.s.cfg.Partitions:
		return nil
	default:
		return fmt.Errorf("%s has %d partitions and this relay is set to %d: every relay of a table must use the same number",
			g.s.partitions, count, g.s.cfg.Partitions)
	}
}

// join renews holder's membership of the group, and reports whether it
// has just begun.
func (g ownerTx) join() (joined bool, err error) {
	err = g.tx.QueryRowContext(g.ctx, g.s.sql.Join, g.topic, g.holder, g.lease(), !g.s.cfg.PollOnly).Scan(&joined)
	return joined, err
}

// dropExpired ends the memberships that were not renewed in time, and
// reports how many.
func (g ownerTx) dropExpired() (int64, error) {
	res, err := g.tx.ExecContext(g.ctx, g.s.sql.DropExpired, g.topic)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// takeOverDead frees the partitions and ends the memberships of the
// members whose session is gone, once seen so for deadGrace (see
// deadHolders): a relay killed or restarted is replaced within moments,
// not at the end of its lease. It returns them.
func (g ownerTx) takeOverDead(dead *deadHolders) ([]string, error) {
	deadNow, err := queryStrings(g.ctx, g.tx, g.s.sql.DeadMembers, g.topic, g.holder)
	if err != nil {
		return nil, err
	}
	gone := dead.confirm(time.Now(), deadNow)
	if len(gone) == 0 {
		return nil, nil
	}
	return gone, g.free(gone)
}

// free gives back every partition of the relays named and ends their
// membership.
func (g ownerTx) free(relays []string) error {
	if _, err := g.tx.ExecContext(g.ctx, g.s.sql.FreePartitions, g.topic, relays); err != nil {
		return err
	}
	_, err := g.tx.ExecContext(g.ctx, g.s.sql.EndMemberships, g.topic, relays)
	return err
}

// release gives back the partitions of holder in parts.
func (g ownerTx) release(parts []int) error {
	if len(parts) == 0 {
		return nil
	}
	_, err := g.tx.ExecContext(g.ctx, g.s.sql.Release, g.topic, g.holder, parts)
	return err
}

// renew extends the leases of holder's partitions and returns them. A
// lease still in holder's name is nobody else's, expired or not.
func (g ownerTx) renew() ([]int, error) {
	return queryInts(g.ctx, g.tx, g.s.sql.Renew, g.topic, g.holder, g.lease())
}

// share counts the group's members, itself included, and holder's fair
// share of the partitions: the most it may own.
func (g ownerTx) share() (members, fair int, err error) {
	if err := g.tx.QueryRowContext(g.ctx, g.s.sql.CountMembers, g.topic).Scan(&members); err != nil {
		return 0, 0, err
	}
	members = max(members, 1)
	return members, (g.s.cfg.Partitions + members - 1) / members, nil
}

// takeFree leases to holder up to want partitions that are free or whose
// lease ended, the lowest first, and returns them.
func (g ownerTx) takeFree(want int) ([]int, error) {
	return queryInts(g.ctx, g.tx, g.s.sql.TakeFree, g.topic, g.holder, g.lease(), want)
}

// holders is who holds the partitions other than holder: what a holder
// short of its share waits for.
func (g ownerTx) holders() ([]heldBy, error) {
	rows, err := g.tx.QueryContext(g.ctx, g.s.sql.Holders, g.topic, g.holder)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []heldBy
	for rows.Next() {
		var h heldBy
		if err := rows.Scan(&h.relay, &h.partitions, &h.until, &h.live); err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

func queryStrings(ctx context.Context, tx *sql.Tx, q string, args ...any) ([]string, error) {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func queryInts(ctx context.Context, tx *sql.Tx, q string, args ...any) ([]int, error) {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
