package clock

import "time"

// Scaled is a clock that runs at Rate times the speed of Base from the
// moment it was made: a second of Base time is Rate seconds on it. It
// stands for a machine whose oscillator runs fast (Rate > 1) or slow, for
// tests of the lessor's drift bound.
type Scaled struct {
	base  Clock
	start time.Time
	rate  float64
}

// NewScaled returns a clock that runs at rate (> 0) times base's speed,
// starting at base.Now().
func NewScaled(base Clock, rate float64) *Scaled {
	return &Scaled{base: base, start: base.Now(), rate: rate}
}

// Now returns start + (base time elapsed since start)·rate.
func (s *Scaled) Now() time.Time {
	return s.start.Add(time.Duration(float64(s.base.Now().Sub(s.start)) * s.rate))
}

// After fires once d has passed on this clock: d/rate of base time.
func (s *Scaled) After(d time.Duration) <-chan time.Time {
	return s.base.After(time.Duration(float64(d) / s.rate))
}
