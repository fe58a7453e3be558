// Package lessor runs the leader's timers: it decides when a session has
// expired and when a lock-delay is over, and makes each decision by proposing
// a command (Expire, EndLockDelay) through the Raft log. It is the only
// server code that reads a clock, through clock.Clock.
//
// Keepalives are not log entries: a renewal only moves a deadline in the
// leader's memory, as etcd's lessor does. That is safe because expiry is
// the only thing the deadline decides, and only the leader proposes it:
//
//	holder:  sent ──────────── TTL·(1−drift) − margin ──┤ gives up
//	grantor:      answered ─────────── TTL·(1+drift) ─────────┤ may expire
//
// The holder counts from the moment it sent the request, the grantor from
// the moment it answered, and each widens its bound by the largest clock-rate
// drift either side may have, so the holder stops before the grantor frees
// the lock unless rates differ by more than Drift.
//
// A new leader does not know the old leader's deadlines. On Promote it
// treats every live session as renewed at that moment (plus Grace, a margin
// the argument below does not need), never shortening a deadline: expiring
// late only delays failover, expiring early would break exclusivity as the
// holder sees it.
//
// # Confirmed leadership: why Done always fires before another grant
//
// The claim: a holder's Lock.Done() fires before any other session is
// granted the same name, whatever the message delays and reorderings, for
// a process pause of any length on any node, as long as clock rates differ
// by no more than Drift. The steps, with what each relies on:
//
//  1. The holder's deadline is s + TTL·(1−Drift) − margin, where s is when
//     it SENT the last request the grantor acknowledged for its session:
//     CreateSession, an Acquire, or a keepalive (client.Session). Done fires
//     at that deadline, or earlier.
//  2. Every acknowledgement was given by a leader L after a quorum showed
//     that no successor existed when the request arrived: a keepalive is
//     answered only after RenewMany's Confirmer
//     (raftnode.Node.ConfirmLeadership) counted a quorum's answers to
//     AppendEntries sent after the request arrived; CreateSession and a
//     grant are answered only after an entry proposed after the request
//     arrived committed in L's term (RenewCommitted). Either way, a quorum
//     took L's term after s, so any successor L′ (which needs votes of an
//     overlapping quorum, given in a later term) was elected after s. This
//     holds however long L was paused: evidence from before a pause is
//     never counted (raftnode/confirm.go).
//  3. L′ is promoted after its election (and its barrier), so at P > s, and
//     expires the session no earlier than P + TTL·(1+Drift) (Promote); a
//     checkpointed session no earlier than the deadline of the leader that
//     wrote the checkpoint (see Checkpoints below), which is itself bounded
//     by steps 2–3 for that leader.
//  4. L itself expires the session no earlier than its answer + TTL·(1+Drift)
//     (renewLocked), and its answer follows the request's arrival, so
//     follows s.
//  5. Only the leader proposes Expire, and the name is granted again only
//     after the Expire (or the holder's release) commits. By 3 and 4 that
//     is after s + TTL·(1+Drift) on the clock of the leader that decided,
//     while by 1 the holder gave up at s + TTL·(1−Drift) − margin on its
//     own clock: with rates within Drift, the holder's Done comes first.
//
// A leader resumed from a pause answers nothing from memory: its renewals
// wait for a confirmation that fails (ErrUnconfirmed or ErrNotLeader, both
// retryable), and a session whose Expire it proposed but that has not
// applied is ErrExpiring (retryable), not ErrNotFound: lease-expired is
// answered only for a session gone from the applied state of a confirmed
// leader. Fencing tokens do not depend on any of this: a late writer is
// refused by the resource whatever the holder believed.
//
// # Checkpoints: dead holders are freed however often leadership moves
//
// Restarting every session's full TTL on each promotion would let a crashed
// holder's locks live forever if leadership moves more often than the TTL.
// So the leader records, through the log, how long each unrenewed session
// has left (a Checkpoint command, batched, proposed at most every
// min(CheckpointInterval, TTL/10) per session and never on a renewal). A
// session counts as unrenewed once this leader has not renewed it for
// 2/5 of its TTL (holders renew every TTL/3 by default), so live holders are
// normally never checkpointed.
//
// A checkpointed session is promoted to now + remaining·(1+Drift), without
// Grace. That never shortens a lease a holder may believe it has:
//
//   - Every renewal acknowledged before the checkpoint was computed is in
//     its remaining time (remaining = deadline − now on the leader that
//     wrote it, and that deadline covered its own promotion and grace).
//     The checkpoint commits before the next leader's promotion, so
//     promotion + remaining is not earlier than that deadline.
//   - No renewal is acknowledged after it unless the checkpoint is cleared
//     in the log first: a session the lessor may have checkpointed is
//     renewed only after a clear (a Checkpoint entry with cleared set and a
//     higher generation) commits, and a new leader promotes a cleared
//     session to its full TTL plus Grace as before. A checkpoint computed
//     before a clear carries the older generation and is ignored when it
//     commits after it; the lessor computes no checkpoint of a session
//     while its clear is in flight.
//
// Only holders that miss renewals for 2/5 TTL ever pay that log write.
//
// The bound: a session whose holder died is expired by its leader at
// death + TTL·(1+Drift) (+ Grace if that leader was promoted after the
// death). A leader change before the session's first checkpoint (2/5 TTL
// unrenewed on one leader) restarts its count once more, with Grace: that
// adds less than 2/5 TTL. Each leader change after it adds at most the age
// of the last checkpoint at the change (≤ min(CheckpointInterval, TTL/10)
// + Tick + the election), scaled by (1+Drift). As long as leaders hold
// office longer than 2/5 TTL + the checkpoint interval, a dead holder is
// freed within
//
//	TTL·(1+Drift) + Grace + 2/5·TTL + n·(min(CheckpointInterval, TTL/10) + Tick + election)·(1+Drift)
//
// where n is the number of leader changes in that time. The window of
// 2/5 TTL is the price of renewals that never touch the disk.
//
// # Cost
//
// Deadlines sit in a min-heap keyed by the next time something can happen
// to the session (its deadline, or its next checkpoint): a tick looks only
// at the sessions whose time came, and a renewal moves no heap entry (a
// popped entry whose deadline moved is pushed back). Idle sessions cost
// nothing per tick, and the loop sleeps through ticks with nothing due: a
// leader whose sessions all renew wakes only when a checkpoint or a
// deadline comes, one with none never.
package lessor

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// Errors of the renewals and of a Proposer.
var (
	// ErrNotLeader: this lessor is not running (the node is not the leader).
	ErrNotLeader = errors.New("lessor: not the leader")
	// ErrNotFound: a leader whose leadership was confirmed does not know
	// the session: it ended in the applied state, or never existed.
	ErrNotFound = errors.New("lessor: session not found")
	// ErrExpiring: the session's Expire was proposed and its outcome is not
	// known yet: it is not renewed, and not known to be gone either (a
	// leader resumed from a pause proposes the expiry of sessions its
	// successor keeps). Retryable.
	ErrExpiring = errors.New("lessor: session expiring, outcome not known yet")
	// ErrUnconfirmed: the Confirmer did not confirm this node's leadership;
	// nothing was renewed. Retryable (on the leader).
	ErrUnconfirmed = errors.New("lessor: leadership not confirmed")
	// ErrNotApplied is what a Proposer's error wraps when the command
	// certainly did not apply (not the leader, could not be proposed).
	// Any other error means the outcome is unknown.
	ErrNotApplied = errors.New("lessor: command not applied")
)

// Lessor tracks deadlines while its node leads. Methods are safe for
// concurrent use. Lock order: Lessor.mu is a leaf; it is never held while
// proposing.
type Lessor struct {
	cfg      Config
	proposer Proposer

	mu       sync.Mutex // protects following
	leading  bool
	stop     chan struct{} // closed by Demote/Close; nil when not leading
	promoted chan struct{} // closed by Promote; a new one after Demote
	sessions map[string]*entry
	timers   timerHeap              // every tracked session not in flight, by entry.at
	delays   map[delayKey]time.Time // lock-delay → earliest end
	closed   bool
	wakeAt   time.Time     // when the sleeping loop looks next (farFuture: nothing scheduled); zero while it looks
	wake     chan struct{} // cap 1: something is due before wakeAt

	wg sync.WaitGroup // the loop and in-flight proposals
}

// entry is one tracked session; its fields are protected by Lessor.mu.
type entry struct {
	id       string
	ttl      time.Duration
	deadline time.Time
	renewed  time.Time // last renewal on this leader, or the promotion
	expiring bool      // an Expire was proposed and may apply: renewals are refused
	inflight bool      // an Expire proposal is running (the entry is off the heap)

	short    bool      // a checkpoint of this session may be in the log
	clearing int       // clears in flight: no checkpoint is computed meanwhile
	gen      uint64    // checkpoint generation this lessor uses
	nextCP   time.Time // when short: the next checkpoint

	at  time.Time // heap key: the next time the loop looks at the entry
	idx int       // heap index; -1 when off the heap
}

type delayKey struct {
	name  string
	token uint64
}

// New returns a Lessor that is not leading.
func New(cfg Config, p Proposer) (*Lessor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Lessor{cfg: cfg, proposer: p, sessions: map[string]*entry{}, delays: map[delayKey]time.Time{}, wake: make(chan struct{}, 1), promoted: make(chan struct{})}, nil
}

// grantorTTL is how long the grantor waits, from its answer, before it may
// expire a session with this TTL.
func (l *Lessor) grantorTTL(ttl time.Duration) time.Duration {
	return ttl + time.Duration(float64(ttl)*l.cfg.Drift)
}

// idleAfter is how long a session goes unrenewed on this leader before it
// is checkpointed.
func idleAfter(ttl time.Duration) time.Duration { return ttl * 2 / 5 }

// checkpointEvery is the interval between checkpoints of one session.
func (l *Lessor) checkpointEvery(ttl time.Duration) time.Duration {
	return max(min(l.cfg.CheckpointInterval, ttl/10), l.cfg.Tick)
}

// Promote starts the lessor on a new leader. sessions and delays are the
// applied state after the leader's barrier: every session is treated as
// renewed now, plus Grace, except a checkpointed one, which keeps its
// checkpointed remaining time (see the package comment); every lock-delay
// restarts in full, plus Grace.
func (l *Lessor) Promote(sessions []*fsmpb.Session, delays []fsm.LockDelay) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.leading {
		return
	}
	l.leading = true
	l.stop = make(chan struct{})
	close(l.promoted)
	now := l.cfg.Clock.Now()
	checkpointed := 0
	for _, s := range sessions {
		ttl := time.Duration(s.GetTtlMs()) * time.Millisecond
		e := &entry{id: s.GetLeaseId(), ttl: ttl, renewed: now, gen: s.GetCheckpointGeneration(), idx: -1}
		if s.GetCheckpointed() {
			checkpointed++
			rem := time.Duration(s.GetCheckpointRemainingMs()) * time.Millisecond
			e.deadline = now.Add(rem + time.Duration(float64(rem)*l.cfg.Drift))
			e.short, e.nextCP = true, now.Add(l.checkpointEvery(ttl))
		} else {
			e.deadline = promoteDeadline(now, l.cfg.Grace, l.grantorTTL(ttl))
		}
		l.sessions[e.id] = e
		l.scheduleLocked(e)
	}
	for _, d := range delays {
		l.delays[delayKey{d.Name, d.Token}] = now.Add(l.cfg.Grace + l.grantorTTL(time.Duration(d.Ms)*time.Millisecond))
	}
	l.cfg.Logger.Info("lessor promoted", "sessions", len(sessions), "checkpointed", checkpointed, "lock_delays", len(delays), "grace", l.cfg.Grace)
	stop := l.stop
	l.wg.Go(func() { l.loop(stop) })
}

// Promoted returns a channel that is closed while the lessor leads: at once
// when it leads now, else at its next Promote.
func (l *Lessor) Promoted() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.promoted
}

// Demote stops the lessor when leadership is lost and forgets every
// deadline; the next leader rebuilds them from the log.
func (l *Lessor) Demote() {
	l.mu.Lock()
	l.demoteLocked()
	l.mu.Unlock()
}

func (l *Lessor) demoteLocked() {
	if !l.leading {
		return
	}
	l.leading = false
	close(l.stop)
	l.stop = nil
	l.promoted = make(chan struct{})
	clear(l.sessions)
	// An entry a renewal still holds (its clear in flight) must not look
	// scheduled when the renewal comes back: it is on no heap any more.
	for _, e := range l.timers {
		e.idx = -1
	}
	l.timers = nil
	clear(l.delays)
}

// Close stops the lessor and waits for its goroutines. It is idempotent.
func (l *Lessor) Close() {
	l.mu.Lock()
	l.closed = true
	l.demoteLocked()
	l.mu.Unlock()
	l.wg.Wait()
}

// scheduleLocked puts e on the heap at the next time the loop must look at
// it: its deadline, or its next checkpoint.
func (l *Lessor) scheduleLocked(e *entry) {
	at := e.deadline
	// While a clear is in flight no checkpoint is computed (due skips it):
	// a checkpoint time here would already be past and keep e at the top
	// of the heap. The clear's completion schedules e again.
	if l.cfg.CheckpointInterval > 0 && e.clearing == 0 {
		cp := e.renewed.Add(idleAfter(e.ttl))
		if e.short {
			cp = e.nextCP
		}
		if cp.Before(at) {
			at = cp
		}
	}
	l.scheduleAtLocked(e, at)
}

func (l *Lessor) scheduleAtLocked(e *entry, at time.Time) {
	e.at = at
	if e.idx >= 0 {
		heap.Fix(&l.timers, e.idx)
	} else {
		heap.Push(&l.timers, e)
	}
	l.wakeForLocked(at)
}

// delayLocked records that lock-delay k ends at at.
func (l *Lessor) delayLocked(k delayKey, at time.Time) {
	l.delays[k] = at
	l.wakeForLocked(at)
}

// wakeForLocked makes the sleeping loop plan again when something comes
// due before it means to look.
func (l *Lessor) wakeForLocked(at time.Time) {
	if !l.wakeAt.IsZero() && at.Before(l.wakeAt) {
		l.wakeAt = time.Time{}
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// nextLocked is the earliest time anything is scheduled; false: nothing is.
func (l *Lessor) nextLocked() (time.Time, bool) {
	var next time.Time
	if len(l.timers) > 0 {
		next = l.timers[0].at
	}
	for _, at := range l.delays {
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next, !next.IsZero()
}

func (l *Lessor) removeLocked(e *entry) {
	if l.sessions[e.id] == e {
		delete(l.sessions, e.id)
	}
	if e.idx >= 0 {
		heap.Remove(&l.timers, e.idx)
	}
}

// renewLocked moves e's deadline to at least now + TTL·(1+Drift).
func (l *Lessor) renewLocked(e *entry, now time.Time) {
	e.deadline = renewTo(e.deadline, now.Add(l.grantorTTL(e.ttl)))
	if now.After(e.renewed) {
		e.renewed = now
	}
}

// Renewal is the outcome of renewing one session.
type Renewal struct {
	TTL time.Duration // the session's TTL, when Err is nil
	Err error         // ErrNotLeader, ErrNotFound, or why a checkpoint could not be cleared
}

// RenewCommitted records that the leader is answering a request of session
// leaseID now, a request answered by a log entry this leader committed
// after the request arrived (CreateSession, a grant): that commit is the
// quorum's confirmation that no successor existed when the request
// arrived, so no other round is needed. The session's deadline becomes at
// least now + TTL·(1+Drift). It refuses sessions it does not know
// (ErrNotFound) and sessions whose expiry is in flight (ErrExpiring); on a
// non-leader it returns ErrNotLeader. A session that may be checkpointed
// is renewed only after a clear commits (at most 2 s).
func (l *Lessor) RenewCommitted(leaseID string) (time.Duration, error) {
	var out [1]Renewal
	l.renew(context.Background(), []string{leaseID}, out[:])
	return out[0].TTL, out[0].Err
}

// RenewMany renews every session of ids, writing the outcome of ids[i] to
// out[i] (len(out) ≥ len(ids)); it is what every keepalive goes through. It
// first confirms leadership with the Confirmer, so a renewal is answered
// only by a node that led after the request arrived (a leader resumed from
// a pause gets ErrUnconfirmed or ErrNotLeader for every id, never a
// renewal); then it renews as RenewCommitted does. Sessions that need
// their checkpoint cleared share one log entry, written under ctx and
// within clearTimeout; the others are renewed in memory at once.
func (l *Lessor) RenewMany(ctx context.Context, ids []string, out []Renewal) {
	if !l.isLeading() {
		fill(out[:len(ids)], Renewal{Err: ErrNotLeader})
		return
	}
	if err := renewConfirm(l, ctx); err != nil {
		if !errors.Is(err, ErrNotLeader) {
			err = fmt.Errorf("%w: %w", ErrUnconfirmed, err)
		}
		fill(out[:len(ids)], Renewal{Err: err})
		return
	}
	l.renew(ctx, ids, out)
}

func fill(out []Renewal, r Renewal) {
	for i := range out {
		out[i] = r
	}
}

func (l *Lessor) isLeading() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leading
}

// renew renews ids on a leader whose answer is confirmed by the caller.
func (l *Lessor) renew(ctx context.Context, ids []string, out []Renewal) {
	l.mu.Lock()
	if !l.leading {
		l.mu.Unlock()
		fill(out[:len(ids)], Renewal{Err: ErrNotLeader})
		return
	}
	now := l.cfg.Clock.Now()
	var (
		pending []int // indexes of ids waiting for a clear
		clears  []*fsmpb.SessionCheckpoint
		entries []*entry
	)
	for i, id := range ids {
		e, ok := l.sessions[id]
		switch {
		case !ok:
			out[i] = Renewal{Err: ErrNotFound}
		case e.expiring && refuseExpiring:
			out[i] = Renewal{Err: ErrExpiring}
		case e.short:
			e.gen++
			e.clearing++
			pending = append(pending, i)
			entries = append(entries, e)
			clears = append(clears, &fsmpb.SessionCheckpoint{LeaseId: id, Cleared: true, Generation: e.gen})
		default:
			l.renewLocked(e, now)
			out[i] = Renewal{TTL: e.ttl}
		}
	}
	stop := l.stop
	l.mu.Unlock()
	if len(pending) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, clearTimeout)
	defer cancel()
	stopped := make(chan struct{})
	go func() { // owned by this call: it ends before the call returns
		defer close(stopped)
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	_, err := l.proposer.Propose(ctx, &fsmpb.Command{UnixMs: now.UnixMilli(), Op: &fsmpb.Command_Checkpoint{Checkpoint: &fsmpb.Checkpoint{Sessions: clears}}})
	cancel()
	<-stopped
	l.mu.Lock()
	defer l.mu.Unlock()
	now = l.cfg.Clock.Now()
	for k, i := range pending {
		e := entries[k]
		e.clearing--
		if e.clearing == 0 && e.idx >= 0 {
			l.scheduleLocked(e) // its checkpoint time counts again
		}
		switch {
		case err != nil:
			out[i] = Renewal{Err: fmt.Errorf("lessor: clear the checkpoint of %s: %w", e.id, err)}
		case !l.leading || l.sessions[e.id] != e:
			out[i] = Renewal{Err: ErrNotLeader}
		case e.expiring && refuseExpiring:
			out[i] = Renewal{Err: ErrExpiring}
		default:
			if e.gen == clears[k].GetGeneration() {
				e.short = false // no later clear was started: the log holds ours
			}
			l.renewLocked(e, now)
			if e.idx >= 0 {
				l.scheduleLocked(e)
			}
			out[i] = Renewal{TTL: e.ttl}
		}
	}
}

// Remaining returns how long session leaseID has before the leader may
// expire it; ok is false when this lessor does not track it.
func (l *Lessor) Remaining(leaseID string) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.sessions[leaseID]
	if !ok || !l.leading {
		return 0, false
	}
	return max(0, e.deadline.Sub(l.cfg.Clock.Now())), true
}

// Observe updates deadlines from one applied log entry: sessions created
// start their TTL now, ended sessions are forgotten, lock-delays that began
// start their timers. It is called for every applied entry, on every node;
// a lessor that is not leading ignores it.
func (l *Lessor) Observe(res *fsm.Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.leading || res.Err != nil {
		return
	}
	now := l.cfg.Clock.Now()
	if s := res.Session; s != nil {
		ttl := time.Duration(s.GetTtlMs()) * time.Millisecond
		e, ok := l.sessions[s.GetLeaseId()]
		if !ok {
			e = &entry{id: s.GetLeaseId(), ttl: ttl, renewed: now, deadline: now.Add(l.grantorTTL(ttl)), gen: s.GetCheckpointGeneration(), idx: -1}
			l.sessions[e.id] = e
			l.scheduleLocked(e)
		} else if !e.short && !e.expiring {
			// An applied Acquire answers the session; a checkpointed one is
			// renewed only through RenewMany's clear.
			l.renewLocked(e, now)
		}
	}
	for _, id := range res.EndedSessions {
		if e, ok := l.sessions[id]; ok {
			l.removeLocked(e)
		}
	}
	for _, d := range res.LockDelays {
		l.delayLocked(delayKey{d.Name, d.Token}, now.Add(l.grantorTTL(time.Duration(d.Ms)*time.Millisecond)))
	}
}
