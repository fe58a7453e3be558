package admission

import (
	"context"
	"sync"

	"github.com/leasehold/leasehold/api"
)

// Parked Acquires
//
// A blocking Acquire that joins a lock's queue keeps its handler (a
// goroutine, its stream and buffers) on the node that proposed it until it
// returns: granted, timed out, cancelled, its session ended, or the server
// draining. The replicated state bounds the queue entries of a session,
// not the requests waiting on them (every retry of one entry, or one
// request per name, parks a handler of its own), so the node bounds those
// itself: per session (Limits.QueuedPerSession) and per principal
// (Limits.QueuedPerPrincipal).
//
// A blocking Acquire takes its place before it is proposed, so that a
// refusal changes nothing (no queue entry is left to withdraw) and
// concurrent requests cannot all pass the check before any of them is
// queued. One granted at once gives the place back as soon as its
// proposal is answered; one queued keeps it until it returns. Only the
// node that proposes counts: a follower forwards an Acquire to the leader
// (the server's onLeader) and takes no place for it, and a leader that lost the lead
// while proposing gives its place back before forwarding. An Acquire that
// waits on a leader that loses the lead stays parked, and counted, there
// until it returns: for a while after a leader change a session may have
// up to its cap parked on the old leader and again on the new one.
//
// A session waits for a name once. While a blocking Acquire of it is
// parked on this node (proposed, or waiting in the queue), one of the
// same session and name with another wait id is refused with
// resource-exhausted before it is proposed, O(1), instead of replacing
// the first one's queue entry (a log entry each, and an answer to the
// one replaced that a client sends again: a loop one session could turn
// into thousands of writes a second). A retry of the parked request (the
// same wait id) is admitted and waits beside it.

// parkedAcquires counts the blocking Acquires parked on this node, in
// total, per session and per principal. Admission and return are O(1).
type parkedAcquires struct {
	perSession, perPrincipal int // 0: no limit

	mu          sync.Mutex             // protects following
	total       int                    // parked Acquires
	bySession   map[string]int         // parked Acquires per lease id; no zero entries
	byPrincipal map[string]int         // parked Acquires per principal; no zero entries
	waiting     map[waitKey]*waitEntry // the wait id parked per session and name; no zero entries
}

// waitKey is a session's wait for one name.
type waitKey struct{ session, name string }

// waitEntry is the wait id parked for a waitKey and the requests parked
// with it (a request and its retries).
type waitEntry struct {
	id uint64
	n  int
}

// NoSecondWait names the refusal of a second wait of a session for a
// name (in leasehold_limit_refused_total); it has no setting.
const NoSecondWait = "one-wait-per-name"

func newParkedAcquires(perSession, perPrincipal int) *parkedAcquires {
	return &parkedAcquires{perSession: perSession, perPrincipal: perPrincipal, bySession: map[string]int{}, byPrincipal: map[string]int{}, waiting: map[waitKey]*waitEntry{}}
}

// enter admits one more parked Acquire of session for principal p, which
// asks for name with waitID, or refuses it naming the limit hit.
func (q *parkedAcquires) enter(session, p, name string, waitID uint64) (*Place, string, *api.Error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if n := q.bySession[session]; q.perSession > 0 && n >= q.perSession {
		return nil, "queued-per-session", Exhausted("queued-per-session", "session %s has %d Acquires waiting on this node, the limit", session, n)
	}
	if n := q.byPrincipal[p]; q.perPrincipal > 0 && n >= q.perPrincipal {
		return nil, "queued-per-principal", Exhausted("queued-per-principal", "principal %s has %d Acquires waiting on this node, the limit", p, n)
	}
	k := waitKey{session, name}
	if e := q.waiting[k]; e != nil && e.id != waitID {
		return nil, NoSecondWait, api.Errorf(api.CodeResourceExhausted,
			"session %s already waits for %q on this node (wait id %d); a session waits for a name once: let that Acquire end, or cancel it with CancelWait, then ask again", session, name, e.id)
	}
	q.total++
	q.bySession[session]++
	q.byPrincipal[p]++
	e := q.waiting[k]
	if e == nil {
		e = &waitEntry{id: waitID}
		q.waiting[k] = e
	}
	e.n++
	return &Place{q: q, key: k, principal: p, waitID: waitID}, "", nil
}

// leave gives pl's place back; calling it again does nothing.
func (q *parkedAcquires) leave(pl *Place) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if pl.released {
		return
	}
	pl.released = true
	q.total--
	if q.bySession[pl.key.session]--; q.bySession[pl.key.session] == 0 {
		delete(q.bySession, pl.key.session)
	}
	if q.byPrincipal[pl.principal]--; q.byPrincipal[pl.principal] == 0 {
		delete(q.byPrincipal, pl.principal)
	}
	e := q.waiting[pl.key]
	if e.n--; e.n == 0 {
		delete(q.waiting, pl.key)
	}
}

// parked is the number of Acquires parked on this node.
func (q *parkedAcquires) parked() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.total
}

// Place is the place a blocking Acquire holds among the parked ones; nil
// for a TryAcquire, which never waits.
type Place struct {
	q         *parkedAcquires
	key       waitKey
	principal string
	waitID    uint64
	released  bool // the place was given back; protected by q.mu
}

// ParkAcquire admits the blocking Acquire of name by session leaseID with
// waitID, by the caller in ctx, to wait on this node, or refuses it with
// resource-exhausted (counted in leasehold_limit_refused_total). Release
// the place once the Acquire no longer waits; a TryAcquire (try) needs
// none.
func (l *Limiter) ParkAcquire(ctx context.Context, leaseID, name string, waitID uint64, try bool) (*Place, error) {
	if try {
		return nil, nil
	}
	pl, limit, err := l.queued.enter(leaseID, Principal(ctx), name, waitID)
	if err != nil {
		l.refuse(limit)
		return nil, err
	}
	return pl, nil
}

// Release gives the place back; calling it again does nothing.
func (p *Place) Release() {
	if p != nil {
		p.q.leave(p)
	}
}

// Waits is told whether the proposal queued the Acquire: one granted at
// once does not wait, and gives its place back now.
func (p *Place) Waits(queued bool) {
	if !queued {
		p.Release()
	}
}

// Parked is the number of Acquires parked on this node.
func (l *Limiter) Parked() int { return l.queued.parked() }
