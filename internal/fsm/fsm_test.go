package fsm

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

func TestAcquire(t *testing.T) {
	runCases(t, []applyCase{
		{
			name:  "free name is granted token 1",
			setup: sessions("A"),
			cmd:   acquire("x", "A"),
			check: func(t *testing.T, r *rig, res Result) {
				wantHolding(t, res, "A", 1)
				wantHolder(t, r, "x", "A", 1)
				wantEvents(t, res, ev{"ACQUIRED", "x", "A", 1})
				if res.Queued || res.Session.GetLeaseId() != "A" || r.m.Lock("x").Owner != "worker-A" {
					t.Fatalf("Queued %v, Session %v, Owner %q", res.Queued, res.Session, r.m.Lock("x").Owner)
				}
			},
		},
		{
			name:  "tokens are global across names",
			setup: append(sessions("A", "B"), acquire("x", "A"), acquire("y", "A")),
			cmd:   acquire("z", "B"),
			check: func(t *testing.T, r *rig, res Result) {
				wantHolding(t, res, "B", 3)
				wantHolder(t, r, "x", "A", 1)
				wantHolder(t, r, "y", "A", 2)
			},
		},
		{
			name:  "a released name is never granted its old token again",
			setup: append(sessions("A"), acquire("x", "A"), release("x", "A", 1)),
			cmd:   acquire("x", "A"),
			check: func(t *testing.T, r *rig, res Result) { wantHolding(t, res, "A", 2) },
		},
		{
			name:  "held name queues a blocking acquire",
			setup: append(sessions("A", "B"), acquire("x", "A")),
			cmd:   acquire("x", "B", waitID(7)),
			check: func(t *testing.T, r *rig, res Result) {
				if !res.Queued || res.Holding != nil {
					t.Fatalf("Queued %v, Holding %v", res.Queued, res.Holding)
				}
				wantEvents(t, res, ev{"QUEUED", "x", "B", 0})
				wantHolder(t, r, "x", "A", 1)
				wantWaiters(t, r, "x", "B")
				if r.m.Token() != 1 {
					t.Fatalf("queueing issued a token: counter %d", r.m.Token())
				}
			},
		},
		{
			name:    "try on a held name is refused",
			setup:   append(sessions("A", "B"), acquire("x", "A")),
			cmd:     acquire("x", "B", try()),
			wantErr: ErrLocked,
		},
		{
			name:    "try on a held name with a queue is refused",
			setup:   append(sessions("A", "B", "C"), acquire("x", "A"), acquire("x", "B")),
			cmd:     acquire("x", "C", try()),
			wantErr: ErrLocked,
			check: func(t *testing.T, r *rig, res Result) {
				want := Contention{Holders: 1, Permits: 1, Waiters: 1, Owner: "worker-A", Token: 1}
				if res.Contention == nil || *res.Contention != want {
					t.Fatalf("Contention %+v, want %+v", res.Contention, want)
				}
			},
		},
		{
			name:    "try while in lock-delay is refused with lock-delay",
			setup:   append(sessions("A", "B"), acquire("x", "A", delay(1000)), expire("A")),
			cmd:     acquire("x", "B", try()),
			wantErr: ErrLockDelay,
		},
		{
			name:    "try while in lock-delay with a queue is refused with lock-delay",
			setup:   append(sessions("A", "B", "C"), acquire("x", "A", delay(1000)), acquire("x", "C"), expire("A")),
			cmd:     acquire("x", "B", try()),
			wantErr: ErrLockDelay,
			check: func(t *testing.T, r *rig, res Result) {
				want := Contention{Permits: 1, Waiters: 1, DelayMs: 1000, DelayToken: 1}
				if res.Contention == nil || *res.Contention != want {
					t.Fatalf("Contention %+v, want %+v", res.Contention, want)
				}
			},
		},
		{
			name:  "blocking acquire while in lock-delay queues",
			setup: append(sessions("A", "B"), acquire("x", "A", delay(1000)), expire("A")),
			cmd:   acquire("x", "B"),
			check: func(t *testing.T, r *rig, res Result) {
				if !res.Queued {
					t.Fatal("not queued")
				}
				wantHolder(t, r, "x", "", 0)
				wantWaiters(t, r, "x", "B")
			},
		},
		{
			name:  "holder re-acquiring gets the same holding",
			setup: append(sessions("A", "B"), acquire("x", "A"), acquire("y", "B")),
			cmd:   acquire("x", "A"),
			check: func(t *testing.T, r *rig, res Result) {
				wantHolding(t, res, "A", 1)
				wantEvents(t, res)
				if r.m.Token() != 2 {
					t.Fatalf("re-acquire issued a token: counter %d", r.m.Token())
				}
			},
		},
		{
			name:  "holder re-acquiring with try gets the same holding",
			setup: append(sessions("A"), acquire("x", "A")),
			cmd:   acquire("x", "A", try()),
			check: func(t *testing.T, r *rig, res Result) { wantHolding(t, res, "A", 1) },
		},
		{
			name:  "queued session re-acquiring stays queued once",
			setup: append(sessions("A", "B", "C"), acquire("x", "A"), acquire("x", "B", waitID(1)), acquire("x", "C")),
			cmd:   acquire("x", "B", waitID(2)),
			check: func(t *testing.T, r *rig, res Result) {
				if !res.Queued || res.Holding != nil {
					t.Fatalf("Queued %v, Holding %v", res.Queued, res.Holding)
				}
				wantEvents(t, res)
				wantWaiters(t, r, "x", "B", "C")
				if id := r.m.Lock("x").Waiters[0].GetWaitId(); id != 2 {
					t.Fatalf("wait id %d, want the latest request's 2", id)
				}
			},
		},
		{
			name:    "queued session trying is refused",
			setup:   append(sessions("A", "B"), acquire("x", "A"), acquire("x", "B")),
			cmd:     acquire("x", "B", try()),
			wantErr: ErrLocked,
		},
		{
			name:    "unknown session",
			setup:   sessions("A"),
			cmd:     acquire("x", "nobody"),
			wantErr: ErrSessionNotFound,
		},
		{
			name:    "closed session",
			setup:   append(sessions("A"), closeSession("A")),
			cmd:     acquire("x", "A"),
			wantErr: ErrSessionNotFound,
		},
		{
			name:    "expired session",
			setup:   append(sessions("A"), expire("A")),
			cmd:     acquire("x", "A"),
			wantErr: ErrSessionNotFound,
		},
	})
}

func TestRelease(t *testing.T) {
	held := append(sessions("A", "B"), acquire("x", "A"))
	runCases(t, []applyCase{
		{
			name:  "holder releases",
			setup: held,
			cmd:   release("x", "A", 1),
			check: func(t *testing.T, r *rig, res Result) {
				wantEvents(t, res, ev{"RELEASED", "x", "A", 1})
				wantHolder(t, r, "x", "", 0)
				if res.Holding != nil {
					t.Fatalf("Holding %v after a release with no queue", res.Holding)
				}
				if l, ok := r.m.locks["x"]; ok {
					t.Fatalf("free lock kept: %+v", l)
				}
			},
		},
		{
			name:  "release hands the lock to the head of the queue in the same Apply",
			setup: append(sessions("A", "B", "C", "D"), acquire("x", "A"), acquire("x", "B", delay(300), waitID(5)), acquire("x", "C"), acquire("x", "D")),
			cmd:   release("x", "A", 1),
			check: func(t *testing.T, r *rig, res Result) {
				wantHolding(t, res, "B", 2)
				wantEvents(t, res, ev{"RELEASED", "x", "A", 1}, ev{"ACQUIRED", "x", "B", 2})
				wantHolder(t, r, "x", "B", 2)
				wantWaiters(t, r, "x", "C", "D")
				if h := r.m.Lock("x").Holder; h.GetLockDelayMs() != 300 || h.GetWaitId() != 5 {
					t.Fatalf("granted holding %v lost the waiter's lock_delay_ms/wait_id", h)
				}
			},
		},
		{name: "wrong lease", setup: held, cmd: release("x", "B", 1), wantErr: ErrNotHolder},
		{name: "wrong token", setup: held, cmd: release("x", "A", 2), wantErr: ErrNotHolder},
		{name: "token 0", setup: held, cmd: release("x", "A", 0), wantErr: ErrNotHolder},
		{name: "unknown name", setup: held, cmd: release("y", "A", 1), wantErr: ErrNotHolder},
		{name: "unknown session", setup: held, cmd: release("x", "nobody", 1), wantErr: ErrNotHolder},
		{
			name:    "closed session, lock since granted to another",
			setup:   append(sessions("A", "B"), acquire("x", "A"), acquire("x", "B"), closeSession("A")),
			cmd:     release("x", "A", 1),
			wantErr: ErrNotHolder,
		},
		{
			name:    "expired session, lock free",
			setup:   append(sessions("A"), acquire("x", "A"), expire("A")),
			cmd:     release("x", "A", 1),
			wantErr: ErrNotHolder,
		},
		{
			name:    "same session, older token of the same name",
			setup:   append(sessions("A"), acquire("x", "A"), release("x", "A", 1), acquire("x", "A")),
			cmd:     release("x", "A", 1),
			wantErr: ErrNotHolder,
		},
		{
			name:    "queued session",
			setup:   append(sessions("A", "B"), acquire("x", "A"), acquire("x", "B")),
			cmd:     release("x", "B", 0),
			wantErr: ErrNotHolder,
		},
		{
			name:    "lock in lock-delay",
			setup:   append(sessions("A", "B"), acquire("x", "A", delay(1000)), acquire("x", "B"), expire("A")),
			cmd:     release("x", "A", 1),
			wantErr: ErrNotHolder,
		},
	})
}

// TestFIFOQueue walks three queued sessions through the queue: each release
// grants the head, in order, with the next token.
func TestFIFOQueue(t *testing.T) {
	r := newRig(t, DefaultLimits())
	r.must(sessions("A", "B", "C", "D")...)
	r.must(acquire("x", "A"))
	for _, s := range []string{"B", "C", "D"} {
		if res := r.must(acquire("x", s)); !res.Queued {
			t.Fatalf("%s not queued", s)
		}
	}
	wantWaiters(t, r, "x", "B", "C", "D")
	prev := struct {
		lease string
		token uint64
	}{"A", 1}
	for i, next := range []string{"B", "C", "D"} {
		res := r.must(release("x", prev.lease, prev.token))
		wantHolding(t, res, next, prev.token+1)
		wantEvents(t, res, ev{"RELEASED", "x", prev.lease, prev.token}, ev{"ACQUIRED", "x", next, prev.token + 1})
		wantWaiters(t, r, "x", []string{"B", "C", "D"}[i+1:]...)
		prev.lease, prev.token = next, prev.token+1
	}
	r.must(release("x", "D", 4))
	if len(r.m.locks) != 0 {
		t.Fatalf("locks left: %v", r.m.locks)
	}
}

func TestCancelWait(t *testing.T) {
	queued := append(sessions("A", "B", "C", "D"), acquire("x", "A"), acquire("x", "B", waitID(7)), acquire("x", "C", waitID(8)), acquire("x", "D", waitID(9)))
	granted := append(slices.Clone(queued), release("x", "A", 1)) // B holds with wait_id 7, token 2
	runCases(t, []applyCase{
		{
			name:  "removes the waiter",
			setup: queued,
			cmd:   cancelWait("x", "B", 7),
			check: func(t *testing.T, r *rig, res Result) {
				wantEvents(t, res, ev{"DEQUEUED", "x", "B", 0})
				wantWaiters(t, r, "x", "C", "D")
				wantHolder(t, r, "x", "A", 1)
			},
		},
		{
			name:  "keeps the order of the others",
			setup: queued,
			cmd:   cancelWait("x", "C", 8),
			check: func(t *testing.T, r *rig, res Result) { wantWaiters(t, r, "x", "B", "D") },
		},
		{
			name:  "last waiter of a delayed lock leaves, the delay stays",
			setup: append(sessions("A", "B"), acquire("x", "A", delay(1000)), acquire("x", "B", waitID(7)), expire("A")),
			cmd:   cancelWait("x", "B", 7),
			check: func(t *testing.T, r *rig, res Result) {
				wantWaiters(t, r, "x")
				if li := r.m.Lock("x"); !li.Delayed || li.DelayToken != 1 {
					t.Fatalf("lock-delay lost: %+v", li)
				}
			},
		},
		{
			name:  "granted with that wait_id: released and passed on",
			setup: granted,
			cmd:   cancelWait("x", "B", 7),
			check: func(t *testing.T, r *rig, res Result) {
				wantEvents(t, res, ev{"RELEASED", "x", "B", 2}, ev{"ACQUIRED", "x", "C", 3})
				wantHolding(t, res, "C", 3)
				wantHolder(t, r, "x", "C", 3)
				wantWaiters(t, r, "x", "D")
			},
		},
		{
			// The blocking request was answered at once but its caller had
			// already given up: nobody learned the token.
			name:  "granted at once with that wait_id: released",
			setup: append(sessions("A"), acquire("x", "A", waitID(3))),
			cmd:   cancelWait("x", "A", 3),
			check: func(t *testing.T, r *rig, res Result) {
				wantEvents(t, res, ev{"RELEASED", "x", "A", 1})
				wantHolder(t, r, "x", "", 0)
			},
		},
		// A re-acquire under another wait_id learns a holding another
		// request created: neither request alone may withdraw it, since
		// the other may have learned the token.
		{name: "a re-acquire's wait_id never withdraws the holding", setup: append(slices.Clone(granted), acquire("x", "B", waitID(70))), cmd: cancelWait("x", "B", 70), unchanged: true},
		{name: "the creating wait_id does nothing after a re-acquire", setup: append(slices.Clone(granted), acquire("x", "B", waitID(70))), cmd: cancelWait("x", "B", 7), unchanged: true},
		{
			name:  "a retry under the creating wait_id keeps it withdrawable",
			setup: append(slices.Clone(granted), acquire("x", "B", waitID(7))),
			cmd:   cancelWait("x", "B", 7),
			check: func(t *testing.T, r *rig, res Result) { wantHolder(t, r, "x", "C", 3) },
		},
		{name: "granted, different wait_id does nothing", setup: granted, cmd: cancelWait("x", "B", 8), unchanged: true},
		{name: "queued, different wait_id does nothing", setup: queued, cmd: cancelWait("x", "B", 8), unchanged: true},
		{name: "wait_id 0 does nothing", setup: append(sessions("A", "B"), acquire("x", "A"), acquire("x", "B")), cmd: cancelWait("x", "B", 0), unchanged: true},
		{name: "unknown name does nothing", setup: queued, cmd: cancelWait("y", "B", 7), unchanged: true},
		{name: "unknown session does nothing", setup: queued, cmd: cancelWait("x", "nobody", 7), unchanged: true},
		{name: "another session's wait_id does nothing", setup: queued, cmd: cancelWait("x", "C", 7), unchanged: true},
	})
}

// TestWithdrawnBeforeArrival: an Acquire applied after its wait id was
// withdrawn (the caller gave up and withdrew it before the request,
// delayed, reached the log) is refused, queued or not, try or not; the
// session's next request, with a new wait id, is not. A session remembers
// its last 16 withdrawals.
func TestWithdrawnBeforeArrival(t *testing.T) {
	held := append(sessions("A", "B"), acquire("x", "A"))
	runCases(t, []applyCase{
		{name: "queued", setup: append(slices.Clone(held), cancelWait("x", "B", 7)), cmd: acquire("x", "B", waitID(7)), wantErr: ErrWithdrawn},
		{name: "free name", setup: append(sessions("B"), cancelWait("y", "B", 7)), cmd: acquire("y", "B", waitID(7)), wantErr: ErrWithdrawn},
		{name: "try", setup: append(sessions("B"), cancelWait("y", "B", 7)), cmd: acquire("y", "B", waitID(7), try()), wantErr: ErrWithdrawn},
		{name: "after it was granted and withdrawn", setup: append(sessions("B"), acquire("y", "B", waitID(7)), cancelWait("y", "B", 7)), cmd: acquire("y", "B", waitID(7)), wantErr: ErrWithdrawn},
		{
			// A cancel_wait of an older leader withdraws as it always did
			// and remembers nothing, as older nodes apply it.
			name:  "a cancel_wait command remembers nothing",
			setup: append(sessions("B"), &fsmpb.Command{Op: &fsmpb.Command_CancelWait{CancelWait: &fsmpb.CancelWait{Name: "y", LeaseId: "B", WaitId: 7}}}),
			cmd:   acquire("y", "B", waitID(7)),
			check: func(t *testing.T, r *rig, res Result) { wantHolder(t, r, "y", "B", 1) },
		},
		{
			name:  "a new wait id",
			setup: append(sessions("B"), cancelWait("y", "B", 7)),
			cmd:   acquire("y", "B", waitID(8)),
			check: func(t *testing.T, r *rig, res Result) { wantHolder(t, r, "y", "B", 1) },
		},
	})
	r := newRig(t, DefaultLimits())
	r.must(sessions("B")...)
	for id := range uint64(maxWithdrawn + 1) {
		r.must(cancelWait("y", "B", 100+id))
	}
	if got := len(r.m.sessions["B"].pb.GetWithdrawnWaitIds()); got != maxWithdrawn {
		t.Fatalf("the session remembers %d withdrawals, want %d", got, maxWithdrawn)
	}
	if res := r.apply(acquire("y", "B", waitID(101))); !errors.Is(res.Err, ErrWithdrawn) {
		t.Fatalf("the 16th latest withdrawal: %v, want ErrWithdrawn", res.Err)
	}
	r.must(acquire("y", "B", waitID(100))) // the oldest, forgotten
	r.must(closeSession("B"))
	if r.m.bytes != 0 {
		t.Fatalf("state bytes %d after the session closed, want 0", r.m.bytes)
	}
}

func TestCloseSession(t *testing.T) {
	runCases(t, []applyCase{
		{
			name:  "holder closes: released, no lock-delay",
			setup: append(sessions("A"), acquire("x", "A", delay(1000))),
			cmd:   closeSession("A"),
			check: func(t *testing.T, r *rig, res Result) {
				wantEvents(t, res, ev{"RELEASED", "x", "A", 1})
				if !slices.Equal(res.Released, []string{"x"}) || !slices.Equal(res.EndedSessions, []string{"A"}) || len(res.LockDelays) != 0 {
					t.Fatalf("Released %q, EndedSessions %q, LockDelays %v", res.Released, res.EndedSessions, res.LockDelays)
				}
				if li := r.m.Lock("x"); li.Holder != nil || li.Delayed || r.m.Session("A") != nil {
					t.Fatalf("lock %+v, session %v", li, r.m.Session("A"))
				}
			},
		},
		{
			name:  "holder closes: passes each name to its queue, in name order",
			setup: append(sessions("A", "B", "C"), acquire("y", "A", delay(1000)), acquire("x", "A"), acquire("x", "B"), acquire("y", "C")),
			cmd:   closeSession("A"),
			check: func(t *testing.T, r *rig, res Result) {
				wantEvents(t, res,
					ev{"RELEASED", "x", "A", 2}, ev{"ACQUIRED", "x", "B", 3},
					ev{"RELEASED", "y", "A", 1}, ev{"ACQUIRED", "y", "C", 4})
				if !slices.Equal(res.Released, []string{"x", "y"}) {
					t.Fatalf("Released %q", res.Released)
				}
				wantHolder(t, r, "x", "B", 3)
				wantHolder(t, r, "y", "C", 4)
			},
		},
		{
			name:  "waiter closes: dequeued, holder keeps the lock",
			setup: append(sessions("A", "B", "C"), acquire("x", "A"), acquire("x", "B"), acquire("x", "C")),
			cmd:   closeSession("B"),
			check: func(t *testing.T, r *rig, res Result) {
				wantEvents(t, res, ev{"DEQUEUED", "x", "B", 0})
				wantHolder(t, r, "x", "A", 1)
				wantWaiters(t, r, "x", "C")
				if len(res.Released) != 0 {
					t.Fatalf("Released %q", res.Released)
				}
			},
		},
		{
			name:  "waiter of a delayed lock closes: the lock stays delayed",
			setup: append(sessions("A", "B"), acquire("x", "A", delay(1000)), acquire("x", "B"), expire("A")),
			cmd:   closeSession("B"),
			check: func(t *testing.T, r *rig, res Result) {
				if li := r.m.Lock("x"); !li.Delayed || len(li.Waiters) != 0 {
					t.Fatalf("lock %+v", li)
				}
			},
		},
		{name: "unknown session", setup: sessions("A"), cmd: closeSession("B"), wantErr: ErrSessionNotFound},
		{name: "closed twice", setup: append(sessions("A"), closeSession("A")), cmd: closeSession("A"), wantErr: ErrSessionNotFound},
	})
}

func TestExpireAndLockDelay(t *testing.T) {
	delayed := append(sessions("A", "B", "C"), acquire("x", "A", delay(1000)), acquire("x", "B", waitID(4)), acquire("x", "C"), expire("A"))
	runCases(t, []applyCase{
		{
			name:  "holder with lock-delay expires: name delayed, queue waits",
			setup: append(sessions("A", "B"), acquire("x", "A", delay(1000)), acquire("x", "B")),
			cmd:   expire("A"),
			check: func(t *testing.T, r *rig, res Result) {
				wantEvents(t, res, ev{"EXPIRED", "x", "A", 1})
				if !slices.Equal(res.LockDelays, []LockDelay{{Name: "x", Token: 1, Ms: 1000}}) {
					t.Fatalf("LockDelays %v", res.LockDelays)
				}
				if !slices.Equal(res.Released, []string{"x"}) || !slices.Equal(res.EndedSessions, []string{"A"}) || res.Holding != nil {
					t.Fatalf("Released %q, EndedSessions %q, Holding %v", res.Released, res.EndedSessions, res.Holding)
				}
				li := r.m.Lock("x")
				if li.Holder != nil || !li.Delayed || li.DelayToken != 1 || li.DelayMs != 1000 {
					t.Fatalf("lock %+v", li)
				}
				wantWaiters(t, r, "x", "B")
				if ds := r.m.LockDelays(); !slices.Equal(ds, []LockDelay{{Name: "x", Token: 1, Ms: 1000}}) {
					t.Fatalf("Machine.LockDelays %v", ds)
				}
			},
		},
		{
			name:  "holder without lock-delay expires: passed on at once",
			setup: append(sessions("A", "B"), acquire("x", "A"), acquire("x", "B")),
			cmd:   expire("A"),
			check: func(t *testing.T, r *rig, res Result) {
				wantEvents(t, res, ev{"EXPIRED", "x", "A", 1}, ev{"ACQUIRED", "x", "B", 2})
				wantHolding(t, res, "B", 2)
				if len(res.LockDelays) != 0 || r.m.Lock("x").Delayed {
					t.Fatalf("lock-delay without lock_delay_ms: %v", res.LockDelays)
				}
			},
		},
		{
			name:  "waiter expires: dequeued",
			setup: append(sessions("A", "B"), acquire("x", "A"), acquire("x", "B")),
			cmd:   expire("B"),
			check: func(t *testing.T, r *rig, res Result) {
				wantEvents(t, res, ev{"DEQUEUED", "x", "B", 0})
				wantWaiters(t, r, "x")
				wantHolder(t, r, "x", "A", 1)
			},
		},
		{name: "unknown session", setup: sessions("A"), cmd: expire("B"), wantErr: ErrSessionNotFound},
		{
			name:  "EndLockDelay with the right token grants the head of the queue",
			setup: delayed,
			cmd:   endDelay("x", 1),
			check: func(t *testing.T, r *rig, res Result) {
				wantEvents(t, res, ev{"LOCK_DELAY_ENDED", "x", "", 1}, ev{"ACQUIRED", "x", "B", 2})
				wantHolding(t, res, "B", 2)
				wantWaiters(t, r, "x", "C")
				if r.m.Lock("x").Delayed || len(r.m.LockDelays()) != 0 {
					t.Fatal("still delayed")
				}
			},
		},
		{
			name:  "EndLockDelay with no queue frees the name",
			setup: append(sessions("A"), acquire("x", "A", delay(1000)), expire("A")),
			cmd:   endDelay("x", 1),
			check: func(t *testing.T, r *rig, res Result) {
				wantEvents(t, res, ev{"LOCK_DELAY_ENDED", "x", "", 1})
				if len(r.m.locks) != 0 {
					t.Fatalf("locks left: %v", r.m.locks)
				}
			},
		},
		{name: "EndLockDelay with the wrong token does nothing", setup: delayed, cmd: endDelay("x", 2), unchanged: true},
		{name: "EndLockDelay with token 0 does nothing", setup: delayed, cmd: endDelay("x", 0), unchanged: true},
		{name: "EndLockDelay of an unknown name does nothing", setup: delayed, cmd: endDelay("y", 1), unchanged: true},
		{name: "EndLockDelay of a held name does nothing", setup: append(sessions("A"), acquire("x", "A", delay(10))), cmd: endDelay("x", 1), unchanged: true},
		{
			name: "a stale EndLockDelay does not end a newer delay",
			setup: append(sessions("A", "B"), acquire("x", "A", delay(1000)), acquire("x", "B", delay(500)), expire("A"),
				endDelay("x", 1), expire("B")), // B got token 2, expired: delay 2 in force
			cmd:       endDelay("x", 1),
			unchanged: true,
		},
	})
}

func TestBumpToken(t *testing.T) {
	runCases(t, []applyCase{
		{
			name:  "raises the counter",
			setup: append(sessions("A"), acquire("x", "A")),
			cmd:   bump(100),
			check: func(t *testing.T, r *rig, res Result) {
				if r.m.Token() != 100 {
					t.Fatalf("counter %d", r.m.Token())
				}
				wantHolding(t, r.must(acquire("y", "A")), "A", 101)
				// The bump made tokens up to 100 "issued" for fenced writes.
				r.must(kvPut("k", "v", 100))
			},
		},
		{
			name:  "never lowers the counter",
			setup: append(sessions("A"), acquire("x", "A"), acquire("y", "A"), acquire("z", "A")),
			cmd:   bump(2),
			check: func(t *testing.T, r *rig, res Result) {
				if r.m.Token() != 3 {
					t.Fatalf("counter %d", r.m.Token())
				}
				wantHolding(t, r.must(acquire("w", "A")), "A", 4)
			},
		},
		{name: "to the current value changes nothing", setup: append(sessions("A"), acquire("x", "A")), cmd: bump(1), unchanged: true},
		{name: "to 0 changes nothing", setup: append(sessions("A"), acquire("x", "A")), cmd: bump(0), unchanged: true},
		{
			name:  "to the highest allowed value",
			setup: append(sessions("A"), acquire("x", "A")),
			cmd:   bump(math.MaxInt64),
			check: func(t *testing.T, r *rig, res Result) {
				wantHolding(t, r.must(acquire("y", "A")), "A", math.MaxInt64+1)
			},
		},
		// A bump to the top of uint64 would make the next grant wrap the
		// counter to 0 and reissue every token; the cap leaves 2^63 grants.
		{name: "to the top of uint64 is refused", setup: append(sessions("A"), acquire("x", "A")), cmd: bump(math.MaxUint64), wantErr: ErrInvalidToken},
		{name: "above the allowed maximum is refused", setup: sessions("A"), cmd: bump(math.MaxInt64 + 1), wantErr: ErrInvalidToken},
	})
}

func TestRegisterNode(t *testing.T) {
	r := newRig(t, DefaultLimits())
	r.must(registerNode("n1", "10.0.0.1:7420"), registerNode("n2", "10.0.0.2:7420"), registerNode("n1", "10.0.0.9:7420"))
	if got := r.m.NodeAPIAddr("n1"); got != "10.0.0.9:7420" {
		t.Fatalf("n1 at %q", got)
	}
	if got := r.m.NodeAPIAddr("n3"); got != "" {
		t.Fatalf("unknown node at %q", got)
	}
	roundTrip(t, r.m)
}

func TestUnknownCommandPanics(t *testing.T) {
	for name, cmd := range map[string]*fsmpb.Command{
		"nil command": nil,
		"empty op":    {},
		"only a time": {UnixMs: 42},
	} {
		t.Run(name, func(t *testing.T) {
			mustPanic(t, func() { New(DefaultLimits()).Apply(1, cmd) })
		})
	}
}
