package fsm

import (
	"errors"
	"math"
	"testing"
)

func TestGrantClockFloor(t *testing.T) {
	const top = uint64(math.MaxInt64)
	for _, tc := range []struct {
		name string
		g    GrantClock
		now  int64
		want uint64
	}{
		{"no time passed", GrantClock{Token: 7, LastGrantUnixMs: 5000}, 5000, 8},
		{"clock behind the stamps", GrantClock{Token: 7, LastGrantUnixMs: 5000}, 1000, 8},
		{"10 s at the minimum rate", GrantClock{Token: 7, LastGrantUnixMs: 5000}, 15000, 7 + 10*MinFloorRate + 1},
		{"1 ms rounds up", GrantClock{Token: 7, LastGrantUnixMs: 5000}, 5001, 7 + 1 + 1},
		{"low peak keeps the minimum", GrantClock{Token: 7, LastGrantUnixMs: 0, PeakRate: 400}, 1000, 7 + MinFloorRate + 1},
		{"twice the peak", GrantClock{Token: 7, LastGrantUnixMs: 0, PeakRate: 3000}, 2000, 7 + 2*6000 + 1},
		{"saturates", GrantClock{Token: 7, LastGrantUnixMs: 0, PeakRate: math.MaxUint64}, math.MaxInt64, top},
		{"counter already at the top", GrantClock{Token: math.MaxUint64, LastGrantUnixMs: 0}, 1000, math.MaxUint64},
	} {
		if got := tc.g.Floor(tc.now); got != tc.want {
			t.Errorf("%s: Floor(%d) of %+v = %d, want %d", tc.name, tc.now, tc.g, got, tc.want)
		}
	}
}

// TestGrantClockFollowsStamps: the newest stamp of an applied command and
// the most grants stamped in one second are kept, deterministically, across
// a snapshot; a refused command moves neither.
func TestGrantClockFollowsStamps(t *testing.T) {
	r := newRig(t, DefaultLimits())
	r.must(sessions("A", "B", "C", "D")...)
	r.must(
		at(10_000, acquire("a", "A")),
		at(10_400, acquire("b", "A")),
		at(10_999, acquire("c", "A")), // 3 grants in second 10
		at(12_000, acquire("d", "A")),
		at(11_000, acquire("e", "A")),  // another leader's older stamp counts in second 12
		at(13_000, kvPut("k", "v", 1)), // not a grant, but the newest stamp
	)
	r.apply(at(14_000, kvPut("k", "v", 99))) // refused: never issued
	want := GrantClock{Token: 5, LastGrantUnixMs: 13_000, PeakRate: 3}
	if got := r.m.GrantClock(); got != want {
		t.Fatalf("GrantClock = %+v, want %+v", got, want)
	}
	if got := roundTrip(t, r.m).GrantClock(); got != want {
		t.Fatalf("GrantClock after a snapshot = %+v, want %+v", got, want)
	}
	if got := r.m.Capture().GrantClock(); got != want {
		t.Fatalf("captured GrantClock = %+v, want %+v", got, want)
	}
}

// TestTokenFloor: the floor raises the counter and the grant clock; with
// drop_sessions every session, holding, queue and lock-delay of the old
// state goes while the fenced KV stays; grants continue above the floor.
func TestTokenFloor(t *testing.T) {
	r := busy(t)
	res := r.must(at(99_000, floor(1000, true)))
	if got := r.m.Token(); got != 1000 {
		t.Fatalf("counter %d after a floor of 1000", got)
	}
	if len(r.m.Sessions()) != 0 || len(r.m.LockDelays()) != 0 || r.m.Lock("x").Holder != nil {
		t.Fatal("sessions or locks survived drop_sessions")
	}
	if len(res.EndedSessions) != 3 { // A, B and D; C expired in busy
		t.Fatalf("EndedSessions = %q", res.EndedSessions)
	}
	wantKV(t, r, "k", "v", 2)
	if got := r.m.GrantClock().LastGrantUnixMs; got != 99_000 {
		t.Fatalf("floor stamp not kept: %d", got)
	}
	r.must(create("E", "worker-E"))
	wantHolding(t, r.must(acquire("x", "E")), "E", 1001)
	// A floor below the counter changes nothing but the stamp; above the
	// cap it is refused.
	r.must(floor(5, false))
	if r.m.Token() != 1001 {
		t.Fatalf("a lower floor moved the counter to %d", r.m.Token())
	}
	if res := r.apply(floor(math.MaxUint64, false)); !errors.Is(res.Err, ErrInvalidToken) {
		t.Fatalf("floor past the cap: %v", res.Err)
	}
	// BumpToken is a floor too: it advances the newest stamp.
	r.must(at(120_000, bump(1)))
	if got := r.m.GrantClock(); got.LastGrantUnixMs != 120_000 || got.Token != 1001 {
		t.Fatalf("GrantClock after BumpToken = %+v", got)
	}
}
