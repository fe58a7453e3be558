// Package clock is the seam through which leasehold's server reads time.
// The lessor and the RPC handlers take a Clock; production uses Real, tests
// use Manual (or Real inside testing/synctest, whose bubble fakes time).
package clock

import (
	"sync"
	"time"
)

// Clock tells time and waits. Implementations are safe for concurrent use.
type Clock interface {
	// Now returns the current time. Real's carries a monotonic reading, so
	// differences between two Now values do not depend on wall-clock steps.
	Now() time.Time
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
}

// Real is the system clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// After returns time.After(d).
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Manual is a clock that moves only when Advance is called.
type Manual struct {
	mu      sync.Mutex // protects following
	now     time.Time
	waiters []manualWaiter
}

type manualWaiter struct {
	at time.Time
	ch chan time.Time
}

// NewManual returns a Manual clock set to start.
func NewManual(start time.Time) *Manual { return &Manual{now: start} }

// Now returns the manual time.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// After returns a channel that receives once Advance has moved the clock
// d past now.
func (m *Manual) After(d time.Duration) <-chan time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- m.now
		return ch
	}
	m.waiters = append(m.waiters, manualWaiter{at: m.now.Add(d), ch: ch})
	return ch
}

// Advance moves the clock forward by d and fires every After that is due.
func (m *Manual) Advance(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = m.now.Add(d)
	kept := m.waiters[:0]
	for _, w := range m.waiters {
		if w.at.After(m.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- m.now
	}
	m.waiters = kept
}
