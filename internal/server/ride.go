package server

import (
	"context"
	"sync"
	"time"

	"github.com/leasehold/leasehold/api"
)

// Queued acquires ride with the next release
//
// An Acquire of a lock that others already wait for can only join the end
// of its queue: its log entry grants nothing. Proposed at once it often
// takes an fsync of its own just before the Release that hands the lock
// on, and that Release, the next handoff, waits for it. So such an Acquire
// is held back until the next Release of the lock is proposed, or for at
// most maxRide, and then proposed beside it: in the same log write, or in
// the one after, while the new holder's answer travels. The wait adds
// nothing a caller sees: the lock cannot come to it before a release.
// Waiters still join the queue in the order their entries commit.

// maxRide bounds how long a queued Acquire waits for a Release to ride
// with (a lock whose holder keeps it longer is joined after this).
const maxRide = 2 * time.Millisecond

// rides holds, per lock name, the Acquires waiting for its next Release.
type rides struct {
	mu sync.Mutex // protects m
	m  map[string]*ride
}

type ride struct {
	run chan struct{} // closed when a Release of the name is proposed
	n   int           // acquires waiting on it
}

// ride waits until the next Release of name is proposed, maxRide passes,
// ctx ends or the server drains.
func (s *Server) ride(ctx context.Context, name string) error {
	r := &s.rides
	r.mu.Lock()
	if r.m == nil {
		r.m = map[string]*ride{}
	}
	rd := r.m[name]
	if rd == nil {
		rd = &ride{run: make(chan struct{})}
		r.m[name] = rd
	}
	rd.n++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		if rd.n--; rd.n == 0 && r.m[name] == rd {
			delete(r.m, name)
		}
		r.mu.Unlock()
	}()
	t := time.NewTimer(maxRide)
	defer t.Stop()
	select {
	case <-rd.run:
	case <-t.C:
	case <-ctx.Done():
		return ctxErr(ctx, "gave up waiting for %q", name)
	case <-s.drain:
		return api.Errorf(api.CodeUnavailable, "server shutting down while waiting for %q", name)
	}
	return nil
}

// releasing lets the Acquires waiting for a Release of name go.
func (s *Server) releasing(name string) {
	r := &s.rides
	r.mu.Lock()
	if rd := r.m[name]; rd != nil {
		delete(r.m, name)
		close(rd.run)
	}
	r.mu.Unlock()
}
