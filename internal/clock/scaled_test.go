package clock

import (
	"testing"
	"time"
)

func TestScaledRunsAtItsRate(t *testing.T) {
	start := time.Unix(1000, 0)
	base := NewManual(start)
	fast := NewScaled(base, 1.25)
	base.Advance(4 * time.Second)
	if got, want := fast.Now().Sub(start), 5*time.Second; got != want {
		t.Fatalf("after 4s of base time the 1.25× clock moved %v, want %v", got, want)
	}
	ch := fast.After(5 * time.Second) // 4 s of base time
	base.Advance(3999 * time.Millisecond)
	select {
	case <-ch:
		t.Fatal("After(5s) on a 1.25× clock fired before 4s of base time")
	default:
	}
	base.Advance(time.Millisecond)
	select {
	case <-ch:
	default:
		t.Fatal("After(5s) on a 1.25× clock did not fire after 4s of base time")
	}
}
