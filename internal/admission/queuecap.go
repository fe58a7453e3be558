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

// parkedAcquires counts the blocking Acquires parked on this node, in
// total, per session and per principal. Admission and return are O(1).
type parkedAcquires struct {
	perSession, perPrincipal int // 0: no limit

	mu          sync.Mutex     // protects following
	total       int            // parked Acquires
	bySession   map[string]int // parked Acquires per lease id; no zero entries
	byPrincipal map[string]int // parked Acquires per principal; no zero entries
}

func newParkedAcquires(perSession, perPrincipal int) *parkedAcquires {
	return &parkedAcquires{perSession: perSession, perPrincipal: perPrincipal, bySession: map[string]int{}, byPrincipal: map[string]int{}}
}

// enter admits one more parked Acquire of session for principal p, or
// refuses it naming the limit hit. The returned func gives the place
// back; calling it more than once is harmless.
func (q *parkedAcquires) enter(session, p string) (func(), string, *api.Error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if n := q.bySession[session]; q.perSession > 0 && n >= q.perSession {
		return nil, "queued-per-session", Exhausted("queued-per-session", "session %s has %d Acquires waiting on this node, the limit", session, n)
	}
	if n := q.byPrincipal[p]; q.perPrincipal > 0 && n >= q.perPrincipal {
		return nil, "queued-per-principal", Exhausted("queued-per-principal", "principal %s has %d Acquires waiting on this node, the limit", p, n)
	}
	q.total++
	q.bySession[session]++
	q.byPrincipal[p]++
	var once sync.Once
	return func() {
		once.Do(func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			q.total--
			if q.bySession[session]--; q.bySession[session] == 0 {
				delete(q.bySession, session)
			}
			if q.byPrincipal[p]--; q.byPrincipal[p] == 0 {
				delete(q.byPrincipal, p)
			}
		})
	}, "", nil
}

// parked is the number of Acquires parked on this node.
func (q *parkedAcquires) parked() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.total
}

// Place is the place a blocking Acquire holds among the parked ones; nil
// for a TryAcquire, which never waits.
type Place struct{ give func() }

// ParkAcquire admits the blocking Acquire of session leaseID by the
// caller in ctx to wait on this node, or refuses it with
// resource-exhausted (counted in leasehold_limit_refused_total). Release
// the place once the Acquire no longer waits; a TryAcquire (try) needs
// none.
func (l *Limiter) ParkAcquire(ctx context.Context, leaseID string, try bool) (*Place, error) {
	if try {
		return nil, nil
	}
	release, name, err := l.queued.enter(leaseID, Principal(ctx))
	if err != nil {
		l.refuse(name)
		return nil, err
	}
	return &Place{give: release}, nil
}

// Release gives the place back; calling it again does nothing.
func (p *Place) Release() {
	if p != nil {
		p.give()
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
