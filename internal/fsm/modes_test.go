package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

func shared() acqOpt            { return func(a *fsmpb.Acquire) { a.Mode = fsmpb.Mode_MODE_SHARED } }
func permits(n uint32) acqOpt   { return func(a *fsmpb.Acquire) { a.Permits = n } }
func withValue(v string) acqOpt { return func(a *fsmpb.Acquire) { a.Value = []byte(v) } }
func proclaim(name, lease string, token uint64, v string) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_Proclaim{Proclaim: &fsmpb.Proclaim{Name: name, LeaseId: lease, Token: token, Value: []byte(v)}}}
}

// holders lists name's holdings as "lease:token:slot", in grant order.
func holders(r *rig, name string) []string {
	var out []string
	for _, h := range r.m.Lock(name).Holders {
		out = append(out, fmt.Sprintf("%s:%d:%d", h.GetLeaseId(), h.GetToken(), h.GetSlot()))
	}
	return out
}

func wantHolders(t *testing.T, r *rig, name string, want ...string) {
	t.Helper()
	if got := holders(r, name); !slices.Equal(got, want) {
		t.Fatalf("holders of %q = %q, want %q", name, got, want)
	}
}

func TestSharedMode(t *testing.T) {
	runCases(t, []applyCase{
		{
			name:  "readers hold together",
			setup: append(sessions("A", "B"), acquire("x", "A", shared())),
			cmd:   acquire("x", "B", shared()),
			check: func(t *testing.T, r *rig, res Result) {
				wantHolding(t, res, "B", 2)
				wantHolders(t, r, "x", "A:1:0", "B:2:0")
			},
		},
		{
			name:  "a writer waits for the readers",
			setup: append(sessions("A", "B", "W"), acquire("x", "A", shared()), acquire("x", "B", shared())),
			cmd:   acquire("x", "W"),
			check: func(t *testing.T, r *rig, res Result) {
				if !res.Queued {
					t.Fatal("writer granted beside readers")
				}
				wantHolders(t, r, "x", "A:1:0", "B:2:0")
				wantWaiters(t, r, "x", "W")
			},
		},
		{
			name:  "a queued writer blocks a later reader",
			setup: append(sessions("A", "W", "R"), acquire("x", "A", shared()), acquire("x", "W")),
			cmd:   acquire("x", "R", shared()),
			check: func(t *testing.T, r *rig, res Result) {
				if !res.Queued {
					t.Fatal("a reader overtook the queued writer")
				}
				wantHolders(t, r, "x", "A:1:0")
				wantWaiters(t, r, "x", "W", "R")
			},
		},
		{
			name:    "try as a reader behind a queued writer",
			setup:   append(sessions("A", "W", "R"), acquire("x", "A", shared()), acquire("x", "W")),
			cmd:     acquire("x", "R", shared(), try()),
			wantErr: ErrLocked,
		},
		{
			name:    "a reader waits for a writer",
			setup:   append(sessions("W", "R"), acquire("x", "W")),
			cmd:     acquire("x", "R", shared(), try()),
			wantErr: ErrLocked,
		},
		{
			name:  "the last reader's release grants the writer a larger token",
			setup: append(sessions("A", "B", "W"), acquire("x", "A", shared()), acquire("x", "B", shared()), acquire("x", "W"), release("x", "A", 1)),
			cmd:   release("x", "B", 2),
			check: func(t *testing.T, r *rig, res Result) {
				wantHolding(t, res, "W", 3)
				wantHolders(t, r, "x", "W:3:0")
			},
		},
		{
			name: "a writer's release grants every reader up to the next writer",
			setup: append(sessions("W", "R1", "R2", "W2", "R3"), acquire("x", "W"),
				acquire("x", "R1", shared()), acquire("x", "R2", shared()), acquire("x", "W2"), acquire("x", "R3", shared())),
			cmd: release("x", "W", 1),
			check: func(t *testing.T, r *rig, res Result) {
				wantEvents(t, res, ev{"RELEASED", "x", "W", 1}, ev{"ACQUIRED", "x", "R1", 2}, ev{"ACQUIRED", "x", "R2", 3})
				wantHolders(t, r, "x", "R1:2:0", "R2:3:0")
				wantWaiters(t, r, "x", "W2", "R3")
			},
		},
		{
			name:  "withdrawing a queued writer lets the readers behind it in",
			setup: append(sessions("A", "W", "R"), acquire("x", "A", shared()), acquire("x", "W", waitID(7)), acquire("x", "R", shared())),
			cmd:   cancelWait("x", "W", 7),
			check: func(t *testing.T, r *rig, res Result) {
				wantHolders(t, r, "x", "A:1:0", "R:2:0")
				wantWaiters(t, r, "x")
			},
		},
		{
			name: "an expired reader's lock-delay holds back the writer, not the other reader",
			setup: append(sessions("A", "B", "W"), acquire("x", "A", shared(), delay(1000)), acquire("x", "B", shared()),
				acquire("x", "W"), expire("A")),
			cmd: release("x", "B", 2),
			check: func(t *testing.T, r *rig, _ Result) {
				wantHolders(t, r, "x")
				wantWaiters(t, r, "x", "W")
				res := r.must(endDelay("x", 1))
				wantHolding(t, res, "W", 3)
			},
		},
		{
			name:    "a shared request with permits",
			setup:   sessions("A"),
			cmd:     acquire("x", "A", shared(), permits(2)),
			wantErr: ErrInvalidMode,
		},
		{
			name:    "an unknown mode",
			setup:   sessions("A"),
			cmd:     acquire("x", "A", func(a *fsmpb.Acquire) { a.Mode = 7 }),
			wantErr: ErrInvalidMode,
		},
	})
}

func TestPermitsMode(t *testing.T) {
	sem := func(ids ...string) cmds {
		out := sessions("A", "B", "C", "D")
		for _, id := range ids {
			out = append(out, acquire("s", id, permits(3)))
		}
		return out
	}
	runCases(t, []applyCase{
		{
			name:  "N holders in the lowest free slots",
			setup: sem("A", "B"),
			cmd:   acquire("s", "C", permits(3)),
			check: func(t *testing.T, r *rig, res Result) {
				t.Helper()
				wantHolding(t, res, "C", 3)
				wantHolders(t, r, "s", "A:1:0", "B:2:1", "C:3:2")
				if res.Holding.GetSlot() != 2 {
					t.Fatalf("slot %d, want 2", res.Holding.GetSlot())
				}
			},
		},
		{
			name:  "the N+1st waits",
			setup: sem("A", "B", "C"),
			cmd:   acquire("s", "D", permits(3)),
			check: func(t *testing.T, r *rig, res Result) {
				if !res.Queued {
					t.Fatal("granted a fourth permit of three")
				}
				wantWaiters(t, r, "s", "D")
			},
		},
		{
			name:  "a release passes its slot to the head of the queue",
			setup: append(sem("A", "B", "C"), acquire("s", "D", permits(3))),
			cmd:   release("s", "B", 2),
			check: func(t *testing.T, r *rig, res Result) {
				wantHolding(t, res, "D", 4)
				wantHolders(t, r, "s", "A:1:0", "C:3:2", "D:4:1")
			},
		},
		{
			name:  "an expiry passes its slot on",
			setup: append(sem("A", "B", "C"), acquire("s", "D", permits(3))),
			cmd:   expire("A"),
			check: func(t *testing.T, r *rig, res Result) {
				wantHolders(t, r, "s", "B:2:1", "C:3:2", "D:4:0")
			},
		},
		{
			name:    "a request with other permits",
			setup:   sem("A"),
			cmd:     acquire("s", "D", permits(2)),
			wantErr: ErrInvalidMode,
			check: func(t *testing.T, r *rig, res Result) {
				var pe *PermitsError
				if !errors.As(res.Err, &pe) || pe.Permits != 3 || !strings.Contains(res.Err.Error(), "has 3 permits") {
					t.Fatalf("err %v does not say the current permits", res.Err)
				}
			},
		},
		{
			name:    "a plain request on a semaphore",
			setup:   sem("A"),
			cmd:     acquire("s", "D"),
			wantErr: ErrInvalidMode,
		},
		{
			name:    "too many permits",
			setup:   sessions("A"),
			cmd:     acquire("s", "A", permits(MaxPermits+1)),
			wantErr: ErrInvalidMode,
		},
		{
			name:  "a free name takes the new request's permits",
			setup: append(sem("A"), release("s", "A", 1)),
			cmd:   acquire("s", "D", permits(2)),
			check: func(t *testing.T, r *rig, res Result) {
				if got := r.m.Lock("s").Permits; got != 2 {
					t.Fatalf("permits %d, want 2", got)
				}
			},
		},
	})
}

func TestProclaim(t *testing.T) {
	runCases(t, []applyCase{
		{
			name:  "the holder changes its value",
			setup: append(sessions("A"), acquire("e", "A", withValue("v1"))),
			cmd:   proclaim("e", "A", 1, "v2"),
			check: func(t *testing.T, r *rig, res Result) {
				wantEvents(t, res, ev{"PROCLAIMED", "e", "A", 1})
				if v := res.Events[0].Value; v != "v2" {
					t.Fatalf("event value %q", v)
				}
				if v := string(r.m.Lock("e").Holder.GetValue()); v != "v2" {
					t.Fatalf("value %q, want v2", v)
				}
			},
		},
		{
			name:    "an old token",
			setup:   append(sessions("A", "B"), acquire("e", "A"), release("e", "A", 1), acquire("e", "B"), acquire("e", "A")),
			cmd:     proclaim("e", "A", 1, "late"),
			wantErr: ErrNotHolder,
		},
		{
			name:    "not a holder",
			setup:   append(sessions("A", "B"), acquire("e", "A")),
			cmd:     proclaim("e", "B", 1, "v"),
			wantErr: ErrNotHolder,
		},
		{
			name:    "a free name",
			setup:   sessions("A"),
			cmd:     proclaim("e", "A", 1, "v"),
			wantErr: ErrNotHolder,
		},
		{
			name:  "a queued candidate's value comes with its grant",
			setup: append(sessions("A", "B"), acquire("e", "A", withValue("a")), acquire("e", "B", withValue("b"))),
			cmd:   closeSession("A"),
			check: func(t *testing.T, r *rig, res Result) {
				if v := string(r.m.Lock("e").Holder.GetValue()); v != "b" {
					t.Fatalf("value %q, want b", v)
				}
			},
		},
	})
}

// TestModesSnapshot: the mode, holders, slots and values survive Snapshot and
// Restore byte for byte.
func TestModesSnapshot(t *testing.T) {
	r := newRig(t, DefaultLimits())
	r.must(sessions("A", "B", "C", "D", "W")...)
	r.must(acquire("rw", "A", shared()), acquire("rw", "B", shared()), acquire("rw", "W"), acquire("rw", "C", shared()))
	r.must(acquire("s", "A", permits(2)), acquire("s", "B", permits(2)), acquire("s", "C", permits(2)), release("s", "A", 3))
	r.must(acquire("e", "D", withValue("leader-D")), acquire("e", "C", withValue("c")))
	m := roundTrip(t, r.m)
	if got := m.Lock("s"); got.Permits != 2 || len(got.Holders) != 2 || got.Holders[1].GetSlot() != 0 {
		t.Fatalf("semaphore after restore: %+v", got)
	}
	if got := string(m.Lock("e").Holder.GetValue()); got != "leader-D" {
		t.Fatalf("election value after restore %q", got)
	}
}

func TestRestoreRejectsBadModes(t *testing.T) {
	sess := []*fsmpb.Session{{LeaseId: "A"}, {LeaseId: "B"}, {LeaseId: "C"}}
	held := func(lease string, token uint64, mode fsmpb.Mode, slot uint32) *fsmpb.Holding {
		return &fsmpb.Holding{LeaseId: lease, Token: token, Mode: mode, Slot: slot}
	}
	ex, sh := fsmpb.Mode_MODE_EXCLUSIVE, fsmpb.Mode_MODE_SHARED
	tests := []struct {
		name string
		lock *fsmpb.Lock
	}{
		{"two exclusive holders of one permit", &fsmpb.Lock{Name: "x", Holders: []*fsmpb.Holding{held("A", 1, ex, 0), held("B", 2, ex, 1)}}},
		{"a reader with a writer", &fsmpb.Lock{Name: "x", Holders: []*fsmpb.Holding{held("A", 1, sh, 0), held("B", 2, ex, 0)}}},
		{"more holders than permits", &fsmpb.Lock{Name: "x", Permits: 2, Holders: []*fsmpb.Holding{held("A", 1, ex, 0), held("B", 2, ex, 1), held("C", 3, ex, 2)}}},
		{"a slot twice", &fsmpb.Lock{Name: "x", Permits: 3, Holders: []*fsmpb.Holding{held("A", 1, ex, 1), held("B", 2, ex, 1)}}},
		{"a slot beyond the permits", &fsmpb.Lock{Name: "x", Permits: 2, Holders: []*fsmpb.Holding{held("A", 1, ex, 2)}}},
		{"readers of a semaphore", &fsmpb.Lock{Name: "x", Permits: 2, Holders: []*fsmpb.Holding{held("A", 1, sh, 0)}}},
		{"holder and holders", &fsmpb.Lock{Name: "x", Holder: held("A", 1, ex, 0), Holders: []*fsmpb.Holding{held("B", 2, sh, 0)}}},
		{"a free permit with a queue", &fsmpb.Lock{Name: "x", Permits: 2, Holders: []*fsmpb.Holding{held("A", 1, ex, 0)}, Waiters: []*fsmpb.Waiter{{LeaseId: "B"}}}},
		{"a reader queued behind readers only", &fsmpb.Lock{Name: "x", Holders: []*fsmpb.Holding{held("A", 1, sh, 0)}, Waiters: []*fsmpb.Waiter{{LeaseId: "B", Mode: sh}}}},
		{"too many permits", &fsmpb.Lock{Name: "x", Permits: MaxPermits + 1, Holders: []*fsmpb.Holding{held("A", 1, ex, 0)}}},
		// Apply refuses a shared request with more than one permit and a
		// request of any other mode, queued or not.
		{"a reader queued for a semaphore", &fsmpb.Lock{Name: "x", Permits: 2, Holders: []*fsmpb.Holding{held("A", 1, ex, 0), held("B", 2, ex, 1)}, Waiters: []*fsmpb.Waiter{{LeaseId: "C", Mode: sh}}}},
		{"a reader queued for a semaphore in lock-delay", &fsmpb.Lock{Name: "x", Permits: 3, DelayToken: 3, Waiters: []*fsmpb.Waiter{{LeaseId: "B", Mode: sh}}}},
		{"a waiter of an unknown mode", &fsmpb.Lock{Name: "x", Holders: []*fsmpb.Holding{held("A", 1, ex, 0)}, Waiters: []*fsmpb.Waiter{{LeaseId: "B", Mode: 7}}}},
		{"a holder of an unknown mode", &fsmpb.Lock{Name: "x", Holders: []*fsmpb.Holding{held("A", 1, 7, 0)}}},
	}
	for _, tc := range tests {
		for enc, data := range encodings(t, &fsmpb.Snapshot{Token: 3, Sessions: sess, Locks: []*fsmpb.Lock{tc.lock}}) {
			t.Run(tc.name+"/"+enc, func(t *testing.T) {
				r := busy(t)
				before := r.snapshot()
				if err := r.m.Restore(data); err == nil {
					t.Fatal("Restore accepted a snapshot that breaks a mode invariant")
				} else if !strings.HasPrefix(err.Error(), "fsm: ") {
					t.Fatalf("error %q lacks the package prefix", err)
				}
				if !bytes.Equal(before, r.snapshot()) {
					t.Fatal("failed Restore changed the state")
				}
			})
		}
	}
}

// TestModesNeverMix pins that a session's second request for a name it
// holds or waits for repeats the first only when it asks for the same mode
// and value; any other request is refused and changes nothing, so a reader
// never passes for a writer, nor a lock holder for an election's leader.
func TestModesNeverMix(t *testing.T) {
	mismatch := func(queued bool, mode, asked fsmpb.Mode, value bool, text string) func(*testing.T, *rig, Result) {
		return func(t *testing.T, r *rig, res Result) {
			var e *MismatchError
			if !errors.As(res.Err, &e) {
				t.Fatalf("Err = %v, want a *MismatchError", res.Err)
			}
			if e.Queued != queued || e.Mode != mode || e.Asked != asked || e.Value != value {
				t.Fatalf("MismatchError = %+v", e)
			}
			if !strings.Contains(e.Error(), text) {
				t.Fatalf("message %q does not say %q", e.Error(), text)
			}
		}
	}
	const (
		ex = fsmpb.Mode_MODE_EXCLUSIVE
		sh = fsmpb.Mode_MODE_SHARED
	)
	readers := append(sessions("A", "B"), acquire("x", "A", shared()), acquire("x", "B", shared()))
	runCases(t, []applyCase{
		{
			name:    "a reader asks for the write lock",
			setup:   readers,
			cmd:     acquire("x", "A"),
			wantErr: ErrInvalidMode,
			check:   mismatch(false, sh, ex, false, `"x" is already held shared by this session, the request asked for it exclusive; release it first`),
		},
		{name: "a reader tries for the write lock", setup: readers, cmd: acquire("x", "A", try()), wantErr: ErrInvalidMode},
		{
			name:    "the writer asks for a read lock",
			setup:   append(sessions("W"), acquire("x", "W")),
			cmd:     acquire("x", "W", shared()),
			wantErr: ErrInvalidMode,
			check:   mismatch(false, ex, sh, false, "already held exclusive"),
		},
		{
			name:  "a reader repeats its read lock",
			setup: readers,
			cmd:   acquire("x", "A", shared()),
			check: func(t *testing.T, r *rig, res Result) {
				wantHolding(t, res, "A", 1)
				wantHolders(t, r, "x", "A:1:0", "B:2:0")
			},
		},
		{
			name:  "a semaphore holder repeats its permit",
			setup: append(sessions("A", "B"), acquire("s", "A", permits(2)), acquire("s", "B", permits(2))),
			cmd:   acquire("s", "B", permits(2)),
			check: func(t *testing.T, r *rig, res Result) {
				wantHolding(t, res, "B", 2)
				wantHolders(t, r, "s", "A:1:0", "B:2:1")
			},
		},
		{
			name:    "a leader campaigns with another value",
			setup:   append(sessions("L"), acquire("e", "L", withValue("a"))),
			cmd:     acquire("e", "L", withValue("b")),
			wantErr: ErrInvalidMode,
			check:   mismatch(false, ex, ex, true, "with another value; Proclaim"),
		},
		{name: "a leader's plain acquire of its election", setup: append(sessions("L"), acquire("e", "L", withValue("a"))), cmd: acquire("e", "L"), wantErr: ErrInvalidMode},
		{name: "a reader campaigns", setup: readers, cmd: acquire("x", "A", withValue("a")), wantErr: ErrInvalidMode},
		{
			name:  "a leader repeats its campaign",
			setup: append(sessions("L"), acquire("e", "L", withValue("a"))),
			cmd:   acquire("e", "L", withValue("a")),
			check: func(t *testing.T, r *rig, res Result) { wantHolding(t, res, "L", 1) },
		},
		{
			name:  "a leader campaigns with the value it proclaimed",
			setup: append(sessions("L"), acquire("e", "L", withValue("a")), proclaim("e", "L", 1, "b")),
			cmd:   acquire("e", "L", withValue("b")),
			check: func(t *testing.T, r *rig, res Result) { wantHolding(t, res, "L", 1) },
		},
		{
			name:    "a queued writer asks for a read lock",
			setup:   append(sessions("A", "W"), acquire("x", "A", shared()), acquire("x", "W", waitID(5))),
			cmd:     acquire("x", "W", shared(), waitID(6)),
			wantErr: ErrInvalidMode,
			check:   mismatch(true, ex, sh, false, `"x" is already queued for exclusive by this session, the request asked for it shared; withdraw that request first`),
		},
		{
			name:    "a queued candidate asks with another value",
			setup:   append(sessions("L", "C"), acquire("e", "L", withValue("l")), acquire("e", "C", withValue("c"))),
			cmd:     acquire("e", "C", withValue("d")),
			wantErr: ErrInvalidMode,
			check:   mismatch(true, ex, ex, true, "already queued for by this session with another value"),
		},
		{
			name:  "a queued reader repeats its request",
			setup: append(sessions("W", "R"), acquire("x", "W"), acquire("x", "R", shared(), waitID(5))),
			cmd:   acquire("x", "R", shared(), waitID(6)),
			check: func(t *testing.T, r *rig, res Result) {
				if !res.Queued || res.Err != nil {
					t.Fatalf("repeat of a queued request: %+v", res)
				}
				wantWaiters(t, r, "x", "R")
				if w := r.m.Lock("x").Waiters[0]; w.GetMode() != fsmpb.Mode_MODE_SHARED || w.GetWaitId() != 6 {
					t.Fatalf("waiter = %v", w)
				}
			},
		},
	})
}

// TestSlotsReused: a new holding takes the lowest free slot however the
// slots were freed, the same before and after a snapshot round trip (the
// free slots are not in the snapshot and are rebuilt from the holders).
func TestSlotsReused(t *testing.T) {
	r := newRig(t, DefaultLimits())
	r.must(sessions("A", "B", "C", "D", "E", "F", "G", "H")...)
	for _, s := range []string{"A", "B", "C", "D", "E"} {
		r.must(acquire("s", s, permits(5)))
	}
	r.must(release("s", "D", 4), release("s", "B", 2), release("s", "E", 5))
	restored := roundTrip(t, r.m)
	for _, m := range []*Machine{r.m, restored} {
		var got []uint32
		for i, s := range []string{"F", "G", "H"} {
			res := m.Apply(r.index+uint64(i)+1, acquire("s", s, permits(5)))
			if res.Err != nil || res.Holding == nil {
				t.Fatalf("acquire by %s: %+v", s, res)
			}
			got = append(got, res.Holding.GetSlot())
		}
		if want := []uint32{1, 3, 4}; !slices.Equal(got, want) {
			t.Fatalf("slots taken %v, want the lowest free ones %v", got, want)
		}
	}
}

// TestLockDelaysNeverShorten: on a name with several holders, a holder that
// expires with a shorter lock-delay while a longer one is in force does
// not end the name's delay early: the name keeps the longer length, counted
// again from the later expiry, under the later token.
func TestLockDelaysNeverShorten(t *testing.T) {
	readers := func(first, second int64) cmds {
		return append(sessions("A", "B", "W"), acquire("x", "A", shared(), delay(first)), acquire("x", "B", shared(), delay(second)), acquire("x", "W"))
	}
	delayed := func(token uint64, ms int64) func(*testing.T, *rig, Result) {
		return func(t *testing.T, r *rig, res Result) {
			if want := []LockDelay{{Name: "x", Token: token, Ms: ms}}; !slices.Equal(res.LockDelays, want) {
				t.Fatalf("LockDelays = %v, want %v", res.LockDelays, want)
			}
			if li := r.m.Lock("x"); !li.Delayed || li.DelayToken != token || li.DelayMs != ms {
				t.Fatalf("lock %+v, want a delay of %d ms under token %d", li, ms, token)
			}
			// The earlier delay's end no longer ends the name's delay.
			if res := r.apply(endDelay("x", 1)); len(res.Events) > 0 || !r.m.Lock("x").Delayed {
				t.Fatalf("the earlier delay's end ended the name's delay: %+v", res)
			}
			res = r.apply(endDelay("x", token))
			wantHolding(t, res, "W", 3)
		}
	}
	runCases(t, []applyCase{
		{name: "a shorter delay after a longer one", setup: append(readers(1000, 100), expire("A")), cmd: expire("B"), check: delayed(2, 1000)},
		{name: "a longer delay after a shorter one", setup: append(readers(100, 1000), expire("A")), cmd: expire("B"), check: delayed(2, 1000)},
		{name: "a holder without a delay changes nothing", setup: append(readers(1000, 0), expire("A")), cmd: expire("B"),
			check: func(t *testing.T, r *rig, res Result) {
				if li := r.m.Lock("x"); len(res.LockDelays) != 0 || li.DelayToken != 1 || li.DelayMs != 1000 {
					t.Fatalf("lock %+v, LockDelays %v", li, res.LockDelays)
				}
			}},
	})
}
