//go:build leasehold_sim

package sim

import (
	"time"

	"github.com/leasehold/leasehold/internal/clock"
)

// skewClock is a node's lease clock: it runs at rate times the reference
// clock (time.Now, which inside the simulation's synctest bubble is virtual
// time), counted from start. Rate 1.01 is a clock 1 % fast. Its timers do
// not fire while the node is paused: they fire when it resumes, late, and
// Now has jumped by the pause.
type skewClock struct {
	start time.Time
	rate  float64
	pause *pause
}

var _ clock.Clock = skewClock{}

// Now returns start + (reference elapsed)·rate.
func (c skewClock) Now() time.Time {
	return c.start.Add(time.Duration(float64(time.Since(c.start)) * c.rate))
}

// After fires once d has passed on this clock, that is d/rate of reference
// time, and the node is not paused.
func (c skewClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	time.AfterFunc(time.Duration(float64(d)/c.rate), func() {
		c.pause.wait()
		ch <- c.Now()
	})
	return ch
}
