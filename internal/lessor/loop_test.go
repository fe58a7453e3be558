package lessor

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/internal/clock"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// countingClock counts the waits the lessor arms: one per look it plans.
type countingClock struct {
	clock.Clock
	mu    sync.Mutex // protects n
	waits int
}

func (c *countingClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.waits++
	c.mu.Unlock()
	return c.Clock.After(d)
}

func (c *countingClock) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waits
}

// TestIdleLessorSleeps: a leader with nothing scheduled arms no timer at
// all, one with a far deadline sleeps until it, and a session that comes
// while the loop sleeps is still expired within a tick after its deadline.
// A failing Expire is retried at most once per tick.
func TestIdleLessorSleeps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cc *countingClock
		r := newRig(t, func(c *Config) { cc = &countingClock{Clock: c.Clock}; c.Clock = cc })
		r.p.setRespond(func(context.Context, int, *fsmpb.Command) (fsm.Result, error) {
			return fsm.Result{}, errors.New("raftnode: outcome unknown")
		})
		r.l.Promote(nil, nil)
		r.advanceTo(1000 * r.tick)
		if n := cc.n(); n != 0 {
			t.Fatalf("an idle lessor armed %d timers in 1000 ticks, want 0", n)
		}

		start := r.now()
		r.l.Observe(session("a", time.Minute)) // while the loop sleeps
		deadline := grantorDeadline(start, time.Minute)
		r.advanceTo(deadline)
		if got := r.p.expires(); len(got) != 0 {
			t.Fatalf("Expire proposed at %v, before the deadline %v", r.now(), deadline)
		}
		if n := cc.n(); n > 1 {
			t.Fatalf("%d timers armed for one deadline a minute away, want 1 (a fixed tick arms %d)", n, (deadline-start)/r.tick)
		}
		r.advanceTo(deadline + r.tick)
		if got := r.p.expires(); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("one tick past the deadline: Expire proposed for %v, want [a]", got)
		}
		// Every Expire fails with an unknown outcome: one retry per tick.
		r.advanceTo(deadline + 11*r.tick)
		if got := len(r.p.expires()); got != 11 {
			t.Fatalf("%d Expire proposals in the 11 ticks after the deadline, want one per tick", got)
		}
		prev := r.p.all()
		for i := 1; i < len(prev); i++ {
			if gap := prev[i].at.Sub(prev[i-1].at); gap < r.tick {
				t.Fatalf("Expire proposals %d and %d %v apart, less than a tick", i-1, i, gap)
			}
		}
	})
}
