package lessor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/internal/clock"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// Every test runs in a synctest bubble on a clock.Manual: the clock moves
// only in rig.advanceTo, and synctest.Wait lets the lessor finish each tick
// before the test looks, so "no Expire yet" is a fact, not a race.

// TestExpireNotBeforeDeadline pins the grantor's side of the clock model: a
// session is never expired before answered + TTL·(1+Drift), and is expired
// exactly once within a tick after it.
func TestExpireNotBeforeDeadline(t *testing.T) {
	for _, drift := range []float64{0, 0.02, 0.5} {
		for _, ttl := range []time.Duration{time.Second, 5 * time.Second} {
			t.Run(fmt.Sprintf("drift=%v/ttl=%v", drift, ttl), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					r := newRig(t, func(c *Config) { c.Drift = drift })
					r.l.Promote(nil, nil)
					r.l.Observe(session("a", ttl)) // applied at 0
					r.advanceTo(time.Second)
					got, err := r.l.RenewCommitted("a") // answered at 1 s
					if err != nil || got != ttl {
						t.Fatalf("Renew = %v, %v; want %v, nil", got, err, ttl)
					}
					deadline := time.Second + ttl + time.Duration(float64(ttl)*drift)

					r.advanceTo(deadline)
					if got := r.p.expires(); len(got) != 0 {
						t.Fatalf("at %v (deadline %v) proposed Expire %v", r.now(), deadline, got)
					}
					if rem, ok := r.l.Remaining("a"); !ok || rem != 0 {
						t.Fatalf("Remaining at the deadline = %v, %v; want 0, true", rem, ok)
					}

					r.advanceTo(deadline + r.tick)
					if got := r.p.expires(); !slices.Equal(got, []string{"a"}) {
						t.Fatalf("one tick past the deadline: Expire proposed for %v, want [a]", got)
					}
					p := r.p.all()[0]
					if !p.at.After(r.start.Add(deadline)) {
						t.Fatalf("Expire proposed at %v, not after the deadline %v", p.at.Sub(r.start), deadline)
					}
					if p.cmd.GetUnixMs() != p.at.UnixMilli() {
						t.Fatalf("Expire stamped %d, want the leader's clock %d", p.cmd.GetUnixMs(), p.at.UnixMilli())
					}

					r.advanceTo(deadline + 100*r.tick)
					if got := r.p.expires(); len(got) != 1 {
						t.Fatalf("Expire proposed %d times, want once", len(got))
					}
					if _, ok := r.l.Remaining("a"); ok {
						t.Fatal("the lessor still tracks a session whose Expire was applied")
					}
				})
			})
		}
	}
}

// TestRenewNeverEarlier: Renew moves the deadline to now + TTL·(1+Drift)
// when that is later, and leaves a later deadline (from Promote's grace)
// alone.
func TestRenewNeverEarlier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 5 * time.Second
		r := newRig(t, func(c *Config) { c.Grace = 2 * time.Second })
		r.l.Promote([]*fsmpb.Session{{LeaseId: "a", TtlMs: ttl.Milliseconds()}}, nil)
		deadline := 2*time.Second + grantorDeadline(0, ttl) // 7.1 s

		r.advanceTo(time.Second)
		if _, err := r.l.RenewCommitted("a"); err != nil {
			t.Fatal(err)
		}
		// 1 s + 5.1 s is earlier than the promoted deadline: it must not win,
		// whether it comes from a renewal or from an applied Acquire.
		if rem, _ := r.l.Remaining("a"); rem != deadline-time.Second {
			t.Fatalf("Remaining after an earlier renewal = %v, want %v", rem, deadline-time.Second)
		}
		r.l.Observe(&fsm.Result{Session: &fsmpb.Session{LeaseId: "a", TtlMs: ttl.Milliseconds()}, Holding: &fsmpb.Holding{LeaseId: "a", Token: 1}})
		if rem, _ := r.l.Remaining("a"); rem != deadline-time.Second {
			t.Fatalf("Remaining after an applied Acquire = %v, want %v", rem, deadline-time.Second)
		}

		r.advanceTo(deadline)
		if _, err := r.l.RenewCommitted("a"); err != nil {
			t.Fatalf("Renew at the deadline: %v", err)
		}
		deadline = grantorDeadline(deadline, ttl) // 12.2 s
		if rem, _ := r.l.Remaining("a"); rem != grantorDeadline(0, ttl) {
			t.Fatalf("Remaining after a later renewal = %v, want %v", rem, grantorDeadline(0, ttl))
		}

		// An applied Acquire of the session counts as an answer too.
		r.advanceTo(deadline - time.Second)
		r.l.Observe(&fsm.Result{Session: &fsmpb.Session{LeaseId: "a", TtlMs: ttl.Milliseconds()}, Holding: &fsmpb.Holding{LeaseId: "a", Token: 1}})
		deadline = grantorDeadline(r.now(), ttl)

		r.advanceTo(deadline)
		if got := r.p.expires(); len(got) != 0 {
			t.Fatalf("expired at %v before the renewed deadline %v", r.now(), deadline)
		}
		r.advanceTo(deadline + r.tick)
		if got := r.p.expires(); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("Expire proposed for %v, want [a]", got)
		}
	})
}

func TestRenewRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil)
		if _, err := r.l.RenewCommitted("a"); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("Renew before Promote: %v, want ErrNotLeader", err)
		}
		r.l.Promote(nil, nil)
		if _, err := r.l.RenewCommitted("unknown"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Renew of an unknown session: %v, want ErrNotFound", err)
		}

		// Hold the Expire in flight: the session's end is decided, so a
		// renewal must be refused rather than acknowledged.
		release := make(chan struct{})
		r.p.setRespond(func(ctx context.Context, _ int, _ *fsmpb.Command) (fsm.Result, error) {
			select {
			case <-release:
				return fsm.Result{EndedSessions: []string{"a"}}, nil
			case <-ctx.Done():
				return fsm.Result{}, ctx.Err()
			}
		})
		r.l.Observe(session("a", time.Second))
		r.advanceTo(grantorDeadline(0, time.Second) + r.tick)
		if got := r.p.expires(); len(got) != 1 {
			t.Fatalf("Expire proposals %v, want one in flight", got)
		}
		if _, err := r.l.RenewCommitted("a"); !errors.Is(err, ErrExpiring) {
			t.Fatalf("Renew of an expiring session: %v, want ErrExpiring (not known to be gone yet)", err)
		}
		close(release)
		synctest.Wait()
		if _, err := r.l.RenewCommitted("a"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Renew of an expired session: %v, want ErrNotFound", err)
		}
	})
}

// TestObserveEndedSession: a session closed through the log is forgotten
// and never expired.
func TestObserveEndedSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil)
		r.l.Promote(nil, nil)
		r.l.Observe(session("a", time.Second))
		r.l.Observe(&fsm.Result{EndedSessions: []string{"a"}})
		// A refused command changes nothing, even if it names a session.
		r.l.Observe(&fsm.Result{Err: fsm.ErrNotHolder, Session: &fsmpb.Session{LeaseId: "b", TtlMs: 1000}})
		r.advanceTo(time.Minute)
		if got := r.p.all(); len(got) != 0 {
			t.Fatalf("proposed %d commands for ended or refused sessions", len(got))
		}
		if _, err := r.l.RenewCommitted("b"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Renew of a session from a refused command: %v, want ErrNotFound", err)
		}
	})
}

// deadlineOf is one thing the lessor will end, and the earliest time it may.
type deadlineOf struct {
	what string // "expire a" or "delay n/7"
	at   time.Duration
}

func describe(p proposal) string {
	if e := p.cmd.GetExpire(); e != nil {
		return "expire " + e.GetLeaseId()
	}
	d := p.cmd.GetEndLockDelay()
	return fmt.Sprintf("delay %s/%d", d.GetName(), d.GetToken())
}

// TestPromoteAddsGrace: a new leader treats every session as renewed at its
// promotion and adds Grace, and restarts every lock-delay in full plus Grace.
func TestPromoteAddsGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const grace = 500 * time.Millisecond
		r := newRig(t, func(c *Config) { c.Grace = grace })
		// Leadership arrives at 3 s; the sessions' old deadlines (unknown to
		// this node) might have been anything.
		r.advanceTo(3 * time.Second)
		promoted := r.now()
		r.l.Promote(
			[]*fsmpb.Session{{LeaseId: "a", TtlMs: 5000}, {LeaseId: "b", TtlMs: 1000}},
			[]fsm.LockDelay{{Name: "n", Token: 7, Ms: 2000}},
		)
		want := []deadlineOf{
			{"expire b", promoted + grace + grantorDeadline(0, time.Second)},    // 4.52 s
			{"delay n/7", promoted + grace + grantorDeadline(0, 2*time.Second)}, // 5.54 s
			{"expire a", promoted + grace + grantorDeadline(0, 5*time.Second)},  // 8.6 s
		}
		for i, d := range want {
			r.advanceTo(d.at)
			checkProposals(t, r, want[:i])
			r.advanceTo(d.at + r.tick)
			checkProposals(t, r, want[:i+1])
		}
		r.advanceTo(time.Minute)
		checkProposals(t, r, want)
	})
}

// checkProposals asserts that exactly the ends in want were proposed, in
// that order, each once and none before its time.
func checkProposals(t *testing.T, r *rig, want []deadlineOf) {
	t.Helper()
	got := r.p.all()
	var names []string
	for _, p := range got {
		names = append(names, describe(p))
	}
	var wantNames []string
	for _, d := range want {
		wantNames = append(wantNames, d.what)
	}
	if !slices.Equal(names, wantNames) {
		t.Fatalf("at %v proposed %v, want %v", r.now(), names, wantNames)
	}
	for i, p := range got {
		if !p.at.After(r.start.Add(want[i].at)) {
			t.Fatalf("%s proposed at %v, not after its earliest time %v", names[i], p.at.Sub(r.start), want[i].at)
		}
	}
}

// TestDemoteStopsProposals: a demoted lessor proposes nothing, refuses
// renewals, and cancels its proposals in flight; promoted again, it
// rebuilds its deadlines from the state it is given.
func TestDemoteStopsProposals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil)
		r.l.Promote(nil, nil)
		r.l.Observe(session("a", time.Second))
		r.l.Observe(&fsm.Result{LockDelays: []fsm.LockDelay{{Name: "n", Token: 1, Ms: 1000}}})
		r.l.Demote()
		r.l.Demote() // idempotent
		r.advanceTo(time.Minute)
		if got := r.p.all(); len(got) != 0 {
			t.Fatalf("a demoted lessor proposed %d commands", len(got))
		}
		if _, err := r.l.RenewCommitted("a"); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("Renew after Demote: %v, want ErrNotLeader", err)
		}
		if _, ok := r.l.Remaining("a"); ok {
			t.Fatal("Remaining after Demote reports a deadline")
		}
		r.l.Observe(session("b", time.Second)) // ignored: not leading

		// Promote again; hold the Expire in flight, then lose leadership.
		cancelled := make(chan error, 1)
		r.p.setRespond(func(ctx context.Context, _ int, _ *fsmpb.Command) (fsm.Result, error) {
			<-ctx.Done()
			cancelled <- ctx.Err()
			return fsm.Result{}, ctx.Err()
		})
		r.l.Promote([]*fsmpb.Session{{LeaseId: "a", TtlMs: 1000}}, nil)
		if _, err := r.l.RenewCommitted("b"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Renew of a session observed while demoted: %v, want ErrNotFound", err)
		}
		r.advanceTo(r.now() + grantorDeadline(0, time.Second) + r.tick)
		if got := r.p.expires(); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("after the second Promote proposed %v, want [a]", got)
		}
		r.l.Demote()
		synctest.Wait()
		select {
		case err := <-cancelled:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("in-flight proposal ended with %v, want context.Canceled", err)
			}
		default:
			t.Fatal("Demote did not cancel the proposal in flight")
		}
		r.advanceTo(r.now() + time.Minute)
		if got := r.p.all(); len(got) != 1 {
			t.Fatalf("%d proposals after the second Demote, want none new", len(got)-1)
		}
	})
}

// TestFailedExpireRetried: an Expire that did not apply (an error, or a
// refusal other than "already gone") is proposed again on a later tick.
func TestFailedExpireRetried(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first func() (fsm.Result, error)
	}{
		{"propose error", func() (fsm.Result, error) { return fsm.Result{}, errors.New("raftnode: outcome unknown") }},
		{"refused", func() (fsm.Result, error) { return fsm.Result{Err: errors.New("fsm: something else")}, nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, nil)
				r.p.setRespond(func(_ context.Context, n int, _ *fsmpb.Command) (fsm.Result, error) {
					if n == 0 {
						return tc.first()
					}
					return fsm.Result{Err: fsm.ErrSessionNotFound}, nil // applied by someone else: done
				})
				r.l.Promote(nil, nil)
				r.l.Observe(session("a", time.Second))
				deadline := grantorDeadline(0, time.Second)
				r.advanceTo(deadline + r.tick)
				if got := r.p.expires(); len(got) != 1 {
					t.Fatalf("first try: %v", got)
				}
				r.advanceTo(deadline + 2*r.tick)
				if got := r.p.expires(); !slices.Equal(got, []string{"a", "a"}) {
					t.Fatalf("after a failed Expire: proposed %v, want [a a]", got)
				}
				r.advanceTo(deadline + 100*r.tick)
				if got := r.p.expires(); len(got) != 2 {
					t.Fatalf("Expire proposed %d times, want 2 (the retry succeeded)", len(got))
				}
			})
		})
	}
}

// TestLockDelayEnd: EndLockDelay is proposed no earlier than
// delay·(1+Drift) after the lock-delay began, and retried when it fails.
func TestLockDelayEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil)
		r.p.setRespond(func(_ context.Context, n int, _ *fsmpb.Command) (fsm.Result, error) {
			if n == 0 {
				return fsm.Result{}, errors.New("raftnode: unavailable")
			}
			return fsm.Result{}, nil
		})
		r.l.Promote(nil, nil)
		r.advanceTo(time.Second)
		r.l.Observe(&fsm.Result{LockDelays: []fsm.LockDelay{{Name: "n", Token: 7, Ms: 10_000}}})
		end := grantorDeadline(time.Second, 10*time.Second) // 11.2 s

		r.advanceTo(end)
		if got := r.p.delayEnds(); len(got) != 0 {
			t.Fatalf("EndLockDelay proposed at %v, before %v", got[0].at.Sub(r.start), end)
		}
		r.advanceTo(end + r.tick)
		got := r.p.delayEnds()
		if len(got) != 1 {
			t.Fatalf("one tick after the end: %d EndLockDelay, want 1", len(got))
		}
		if d := got[0].cmd.GetEndLockDelay(); d.GetName() != "n" || d.GetToken() != 7 {
			t.Fatalf("EndLockDelay %v, want n/7", d)
		}
		r.advanceTo(end + 2*r.tick) // the first failed: retried
		r.advanceTo(end + 100*r.tick)
		if got := r.p.delayEnds(); len(got) != 2 {
			t.Fatalf("EndLockDelay proposed %d times, want 2 (one failure, one retry)", len(got))
		}
	})
}

// TestMaxInflight: proposals beyond MaxInflight wait for a slot.
func TestMaxInflight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, func(c *Config) { c.MaxInflight = 2 })
		release := make(chan struct{})
		r.p.setRespond(func(ctx context.Context, _ int, _ *fsmpb.Command) (fsm.Result, error) {
			select {
			case <-release:
				return fsm.Result{}, nil
			case <-ctx.Done():
				return fsm.Result{}, ctx.Err()
			}
		})
		r.l.Promote(nil, nil)
		for i := range 5 {
			r.l.Observe(session(fmt.Sprint("s", i), time.Second))
		}
		r.advanceTo(grantorDeadline(0, time.Second) + 10*r.tick)
		if got := r.p.expires(); len(got) != 2 {
			t.Fatalf("%d proposals in flight, want MaxInflight = 2", len(got))
		}
		close(release)
		r.advanceTo(r.now() + 10*r.tick)
		got := r.p.expires()
		slices.Sort(got)
		if !slices.Equal(got, []string{"s0", "s1", "s2", "s3", "s4"}) {
			t.Fatalf("expired %v, want every session once", got)
		}
	})
}

// TestClose: Close stops the loop and cancels proposals in flight, waits
// for them, is idempotent, and a closed lessor cannot be promoted again.
// The bubble (and goleak in TestMain) fail the test if a goroutine is left.
func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewManual(epoch)
		cfg := DefaultConfig()
		cfg.Confirmer = confirmed
		cfg.Clock = clk
		cfg.Logger = discard
		cfg.CheckpointInterval = 0
		p := &fakeProposer{clk: clk}
		started := make(chan struct{})
		p.respond = func(ctx context.Context, _ int, _ *fsmpb.Command) (fsm.Result, error) {
			close(started)
			<-ctx.Done()
			return fsm.Result{}, ctx.Err()
		}
		l, err := New(cfg, p)
		if err != nil {
			t.Fatal(err)
		}
		l.Close() // before any Promote
		l, err = New(cfg, p)
		if err != nil {
			t.Fatal(err)
		}
		l.Promote(nil, nil)
		l.Observe(session("a", time.Second))
		for range 100 {
			clk.Advance(cfg.Tick)
			synctest.Wait()
		}
		<-started
		l.Close()
		l.Close()
		l.Promote([]*fsmpb.Session{{LeaseId: "b", TtlMs: 1000}}, nil)
		if _, err := l.RenewCommitted("b"); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("Renew on a closed lessor after Promote: %v, want ErrNotLeader", err)
		}
	})
}

// TestRenewManyConfirmsFirst: a keepalive is answered only after the
// Confirmer confirmed leadership for it. A refused confirmation renews
// nothing (the session still expires on its old deadline) and answers
// ErrUnconfirmed, or ErrNotLeader when another node leads.
func TestRenewManyConfirmsFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu     sync.Mutex // protects answer and calls
			answer error
			calls  int
		)
		r := newRig(t, func(c *Config) {
			c.Confirmer = confirmFunc(func(context.Context) error {
				mu.Lock()
				defer mu.Unlock()
				calls++
				return answer
			})
		})
		set := func(err error) {
			mu.Lock()
			answer = err
			mu.Unlock()
		}
		r.l.Promote(nil, nil)
		r.l.Observe(session("a", time.Second)) // applied at 0
		renew := func() error {
			out := make([]Renewal, 2)
			r.l.RenewMany(context.Background(), []string{"a", "unknown"}, out)
			if !errors.Is(out[0].Err, out[1].Err) && !(out[0].Err == nil && errors.Is(out[1].Err, ErrNotFound)) {
				t.Fatalf("one batch, two verdicts on leadership: %v / %v", out[0].Err, out[1].Err)
			}
			return out[0].Err
		}

		r.advanceTo(500 * time.Millisecond)
		set(errors.New("no quorum answered"))
		if err := renew(); !errors.Is(err, ErrUnconfirmed) {
			t.Fatalf("RenewMany with leadership unconfirmed: %v, want ErrUnconfirmed", err)
		}
		set(fmt.Errorf("raft says: %w", ErrNotLeader))
		if err := renew(); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("RenewMany on a deposed leader: %v, want ErrNotLeader", err)
		}
		// Nothing was renewed: the session expires on the deadline of its
		// creation, not of the refused renewals.
		r.advanceTo(grantorDeadline(0, time.Second) + r.tick)
		if got := r.p.expires(); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("after two unconfirmed renewals: Expire proposed for %v, want [a] on the old deadline", got)
		}

		r.l.Observe(session("b", time.Second))
		set(nil)
		out := make([]Renewal, 1)
		r.l.RenewMany(context.Background(), []string{"b"}, out)
		if out[0].Err != nil || out[0].TTL != time.Second {
			t.Fatalf("RenewMany confirmed: %+v, want TTL 1s", out[0])
		}
		mu.Lock()
		defer mu.Unlock()
		if calls != 3 {
			t.Fatalf("Confirmer called %d times for 3 RenewMany, want one each", calls)
		}
	})
}
