package admission

import (
	"container/list"
	"context"
	"sync"

	"github.com/leasehold/leasehold/api"
)

// Fair shares of the node's CPU
//
// A node runs every request in a goroutine of its own, and Go's scheduler
// gives each runnable goroutine its turn: one client with 2 000 requests in
// flight puts 2 000 goroutines in the run queue ahead of everybody else's
// next request, however cheaply each of them is answered (or refused). So
// each principal runs at most ConcurrentPerPrincipal unary requests at
// once; the next ones wait their turn in a queue of that principal's
// (first in, first out), parked, costing the scheduler nothing, and one
// arriving when WaitingPerPrincipal already wait is refused at once with
// resource-exhausted, before its body is read:
//
//	request ──► running < concurrent-per-principal? ──yes──► run
//	                         │no
//	                         ▼
//	            waiting < waiting-per-principal? ──no──► resource-exhausted
//	                         │yes
//	                         ▼
//	            wait (FIFO) for a running request of p to end, or the caller to leave
//
// Only the work of a request counts, not its waits: a request gives its
// share back (Yield) when it starts waiting for the log to commit its
// command, for leadership to be confirmed, or for the leader to answer a
// request this node forwarded, so that a principal's requests waiting
// on the disk, the network or a lock's queue never keep its other
// requests out, and a principal's writes are still committed together. Streams (Watch,
// KeepAliveStream, LockStream) and renewals (KeepAlive) take no share:
// their own caps and meters bound them, and a session's renewals never
// wait behind its owner's other requests.

// shares counts the running and waiting requests of every principal.
type shares struct {
	running, waiting int // per principal; 0: no limit

	mu sync.Mutex        // protects m and every share in it
	m  map[string]*share // principals with a request running or waiting
}

type share struct {
	running int
	queue   list.List // of chan struct{}: closed when the slot is handed over
}

func newShares(running, waiting int) *shares {
	return &shares{running: running, waiting: waiting, m: map[string]*share{}}
}

// ticket is one request's share of its principal.
type ticket struct {
	s    *shares
	p    string
	done bool // given back; protected by s.mu
}

// enter takes a share of p, waiting for it as long as ctx allows. Give it
// back with leave.
func (s *shares) enter(ctx context.Context, p string) (*ticket, *api.Error) {
	t := &ticket{s: s, p: p}
	if s.running <= 0 {
		t.done = true
		return t, nil
	}
	s.mu.Lock()
	sh := s.m[p]
	if sh == nil {
		sh = &share{}
		s.m[p] = sh
	}
	if sh.running < s.running {
		sh.running++
		s.mu.Unlock()
		return t, nil
	}
	if s.waiting > 0 && sh.queue.Len() >= s.waiting {
		s.mu.Unlock()
		return nil, Exhausted("waiting-per-principal", "principal %s has %d requests running and %d waiting on this node, the limits", p, s.running, sh.queue.Len())
	}
	turn := make(chan struct{})
	e := sh.queue.PushBack(turn)
	s.mu.Unlock()
	select {
	case <-turn:
		return t, nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	select {
	case <-turn: // handed over as ctx ended: pass it on
		s.mu.Unlock()
		t.leave()
	default:
		sh.queue.Remove(e)
		s.mu.Unlock()
	}
	return nil, api.Errorf(api.CodeCanceled, "the caller gave up waiting for its turn among principal %s's requests", p)
}

// leave gives t's share back, to the first request of its principal
// waiting or to the pool; calling it again does nothing.
func (t *ticket) leave() {
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.done {
		return
	}
	t.done = true
	sh := s.m[t.p]
	if f := sh.queue.Front(); f != nil {
		close(sh.queue.Remove(f).(chan struct{})) // it runs in this one's place
		return
	}
	if sh.running--; sh.running == 0 {
		delete(s.m, t.p)
	}
}

type yieldKey struct{}

// Yield gives the share of the request in ctx back before it returns: call
// it when the request starts to wait without working (a blocking Acquire
// queued for a lock). Harmless without a share, and when called again.
func Yield(ctx context.Context) {
	if t, ok := ctx.Value(yieldKey{}).(*ticket); ok {
		t.leave()
	}
}
