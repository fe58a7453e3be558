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

var errUnknown = errors.New("raftnode: outcome unknown")

// TestExpireOfUnknownOutcomeIsFinal: after an Expire whose outcome is
// unknown the session stays expiring (renewals are refused with ErrNotFound)
// and the Expire is proposed again; only a definite not-applied re-opens
// renewals.
func TestExpireOfUnknownOutcomeIsFinal(t *testing.T) {
	for _, tc := range []struct {
		name       string
		first      error
		renewOpens bool
	}{
		{"unknown", errUnknown, false},
		{"deadline of the proposal", context.DeadlineExceeded, false},
		{"not applied", fmt.Errorf("%w: not the leader", ErrNotApplied), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, nil)
				release := make(chan struct{})
				r.p.setRespond(func(ctx context.Context, n int, _ *fsmpb.Command) (fsm.Result, error) {
					if n == 0 {
						return fsm.Result{}, tc.first
					}
					select { // hold the retry so the test can look in between
					case <-release:
						return fsm.Result{}, nil
					case <-ctx.Done():
						return fsm.Result{}, ctx.Err()
					}
				})
				r.l.Promote(nil, nil)
				r.l.Observe(session("a", time.Second))
				deadline := grantorDeadline(0, time.Second)
				r.advanceTo(deadline + r.tick)
				if got := r.p.expires(); len(got) != 1 {
					t.Fatalf("first Expire: %v", got)
				}
				synctest.Wait()
				ttl, err := r.l.RenewCommitted("a")
				if tc.renewOpens {
					if err != nil || ttl != time.Second {
						t.Fatalf("Renew after a not-applied Expire = %v, %v; want 1s, nil", ttl, err)
					}
				} else if !errors.Is(err, ErrExpiring) {
					t.Fatalf("Renew after an Expire of unknown outcome = %v, %v; want ErrExpiring (the expiry may still commit)", ttl, err)
				}
				r.advanceTo(r.now() + 2*r.tick)
				if !tc.renewOpens {
					if got := r.p.expires(); len(got) != 2 {
						t.Fatalf("after an Expire of unknown outcome: proposed %v, want it proposed again", got)
					}
					if _, err := r.l.RenewCommitted("a"); !errors.Is(err, ErrExpiring) {
						t.Fatalf("Renew while the retry is in flight: %v, want ErrExpiring", err)
					}
				}
				close(release)
			})
		})
	}
}

// TestPromoteCheckpointed: a checkpointed session is promoted to its
// remaining time (with drift, without Grace); others to the full TTL plus
// Grace.
func TestPromoteCheckpointed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const grace = time.Second
		r := newRig(t, func(c *Config) { c.Grace = grace; c.CheckpointInterval = time.Second })
		r.l.Promote([]*fsmpb.Session{
			{LeaseId: "a", TtlMs: 10_000, Checkpointed: true, CheckpointRemainingMs: 2000},
			{LeaseId: "b", TtlMs: 10_000},
		}, nil)
		if rem, _ := r.l.Remaining("a"); rem != 2040*time.Millisecond {
			t.Fatalf("checkpointed session: Remaining = %v, want 2.04s", rem)
		}
		if rem, _ := r.l.Remaining("b"); rem != grace+grantorDeadline(0, 10*time.Second) {
			t.Fatalf("session without checkpoint: Remaining = %v, want %v", rem, grace+grantorDeadline(0, 10*time.Second))
		}
	})
}

// TestRenewOfCheckpointedSessionClearsFirst: a session the lessor may have
// checkpointed is renewed only after a clear with a newer generation is
// applied; when the clear fails, the renewal is refused and the deadline
// does not move.
func TestRenewOfCheckpointedSessionClearsFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, func(c *Config) { c.CheckpointInterval = time.Second })
		fail := true
		r.p.setRespond(func(_ context.Context, _ int, cmd *fsmpb.Command) (fsm.Result, error) {
			if cmd.GetCheckpoint() != nil && fail {
				return fsm.Result{}, errUnknown
			}
			return fsm.Result{}, nil
		})
		r.l.Promote([]*fsmpb.Session{{LeaseId: "a", TtlMs: 10_000, Checkpointed: true, CheckpointRemainingMs: 2000, CheckpointGeneration: 3}}, nil)
		before, _ := r.l.Remaining("a")
		if _, err := r.l.RenewCommitted("a"); !errors.Is(err, errUnknown) {
			t.Fatalf("Renew with a failing clear: %v, want the clear's error", err)
		}
		if rem, _ := r.l.Remaining("a"); rem != before {
			t.Fatalf("a refused renewal moved the deadline: %v → %v", before, rem)
		}
		fail = false
		r.p.setRespond(nil)
		if ttl, err := r.l.RenewCommitted("a"); err != nil || ttl != 10*time.Second {
			t.Fatalf("Renew = %v, %v; want 10s, nil", ttl, err)
		}
		var clears []*fsmpb.SessionCheckpoint
		for _, p := range r.p.all() {
			clears = append(clears, p.cmd.GetCheckpoint().GetSessions()...)
		}
		if len(clears) != 2 || !clears[1].GetCleared() || clears[1].GetGeneration() <= 3 {
			t.Fatalf("proposed %v; want two clears, the last with a generation above 3", clears)
		}
		if rem, _ := r.l.Remaining("a"); rem != grantorDeadline(0, 10*time.Second) {
			t.Fatalf("after the renewal Remaining = %v, want the full %v", rem, grantorDeadline(0, 10*time.Second))
		}
		n := len(r.p.all())
		if _, err := r.l.RenewCommitted("a"); err != nil || len(r.p.all()) != n {
			t.Fatalf("a renewal after the clear wrote to the log (%d proposals, err %v)", len(r.p.all())-n, err)
		}
	})
}

// logProposer applies proposals to a real fsm.Machine, as the Raft log
// would, and reports every applied entry to the leading lessor's Observe.
type logProposer struct {
	clk *clock.Manual

	mu       sync.Mutex // protects following
	m        *fsm.Machine
	index    uint64
	observe  func(*fsm.Result)
	expired  map[string]time.Time
	proposed []*fsmpb.Command
}

func (p *logProposer) Propose(_ context.Context, cmd *fsmpb.Command) (fsm.Result, error) {
	p.mu.Lock()
	p.index++
	res := p.m.Apply(p.index, cmd)
	p.proposed = append(p.proposed, cmd)
	if cmd.GetExpire() != nil && res.Err == nil {
		p.expired[cmd.GetExpire().GetLeaseId()] = p.clk.Now()
	}
	observe := p.observe
	p.mu.Unlock()
	if observe != nil {
		observe(&res)
	}
	return res, nil
}

func (p *logProposer) state() ([]*fsmpb.Session, []fsm.LockDelay) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m.Sessions(), p.m.LockDelays()
}

// TestDeadHolderFreedUnderLeaderChurn: leadership moves every TTL/2 for 10
// TTLs. A holder that died is still expired within TTL·(1+Drift) + Grace +
// 2/5·TTL (a leader change before its first checkpoint restarts the count) +
// (CheckpointInterval + Tick)·(1+Drift) per leader change; holders that renew — every TTL/3, or late, every 0.45·TTL so
// that they are checkpointed between renewals — are never expired, and no
// new leader's deadline is ever before the local deadline a holder computed
// from its last acknowledged renewal.
func TestDeadHolderFreedUnderLeaderChurn(t *testing.T) {
	for _, phase := range []time.Duration{0, 3400 * time.Millisecond, 8000 * time.Millisecond} {
		t.Run(fmt.Sprint("death at ", phase), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const (
					ttl    = 10 * time.Second
					grace  = time.Second
					cpi    = time.Second
					tenure = ttl / 2
				)
				clk := clock.NewManual(epoch)
				cfg := DefaultConfig()
				cfg.Confirmer = confirmed
				cfg.Clock, cfg.Logger, cfg.Tick, cfg.Grace, cfg.CheckpointInterval = clk, discard, 10*time.Millisecond, grace, cpi
				p := &logProposer{clk: clk, m: fsm.New(fsm.DefaultLimits()), expired: map[string]time.Time{}}
				newLeader := func() *Lessor {
					l, err := New(cfg, p)
					if err != nil {
						t.Fatal(err)
					}
					p.mu.Lock()
					p.observe = l.Observe
					p.mu.Unlock()
					l.Promote(p.state())
					return l
				}
				l := newLeader()
				defer func() { l.Close() }()
				since := func() time.Duration { return clk.Now().Sub(epoch) }
				for _, id := range []string{"dead", "live", "late"} {
					if _, err := p.Propose(context.Background(), &fsmpb.Command{Op: &fsmpb.Command_CreateSession{CreateSession: &fsmpb.CreateSession{LeaseId: id, TtlMs: ttl.Milliseconds()}}}); err != nil {
						t.Fatal(err)
					}
				}
				// holder deadlines: sent + TTL·(1−drift), no margin
				holderDeadline := map[string]time.Duration{}
				lastRenew := map[string]time.Duration{}
				renew := func(id string) {
					sent := since()
					if _, err := l.RenewCommitted(id); err != nil {
						t.Fatalf("at %v: renew %s: %v", sent, id, err)
					}
					holderDeadline[id] = sent + ttl - time.Duration(float64(ttl)*cfg.Drift)
					lastRenew[id] = sent
				}
				for _, id := range []string{"dead", "live", "late"} {
					renew(id)
				}
				changes, changesAfterDeath := 0, 0
				for since() < 10*ttl {
					clk.Advance(cfg.Tick)
					synctest.Wait()
					now := since()
					if now < phase && now-lastRenew["dead"] >= ttl/3 {
						renew("dead")
					}
					if now-lastRenew["live"] >= ttl/3 {
						renew("live")
					}
					if now-lastRenew["late"] >= ttl*45/100 {
						renew("late")
					}
					if now%tenure == 0 {
						l.Close()
						l = newLeader()
						changes++
						if now > phase {
							changesAfterDeath++
						}
						for id, hd := range holderDeadline {
							if _, gone := p.expired[id]; gone {
								continue
							}
							rem, ok := l.Remaining(id)
							if !ok || now+rem < hd {
								t.Fatalf("at %v the new leader may expire %s at %v, before the holder's local deadline %v", now, id, now+rem, hd)
							}
						}
					}
					p.mu.Lock()
					_, done := p.expired["dead"]
					p.mu.Unlock()
					if done {
						break
					}
				}
				p.mu.Lock()
				defer p.mu.Unlock()
				for _, id := range []string{"live", "late"} {
					if at, ok := p.expired[id]; ok {
						t.Fatalf("a renewing holder %q was expired at %v", id, at.Sub(epoch))
					}
				}
				at, ok := p.expired["dead"]
				if !ok {
					t.Fatalf("the dead holder was never expired in %v with %d leader changes", 10*ttl, changes)
				}
				died := holderDeadline["dead"] - ttl + time.Duration(float64(ttl)*cfg.Drift) // its last renewal
				bound := died + grantorDeadline(0, ttl) + grace + idleAfter(ttl) + time.Duration(changesAfterDeath)*time.Duration(float64(cpi+cfg.Tick)*(1+cfg.Drift)) + cfg.Tick
				t.Logf("last renewal %v, expired at %v (%v after it), %d leader changes since, bound %v", died, at.Sub(epoch), at.Sub(epoch)-died, changesAfterDeath, bound)
				if at.Sub(epoch) > bound {
					t.Fatalf("dead holder expired at %v, after the bound %v", at.Sub(epoch), bound)
				}
				if !slices.ContainsFunc(p.proposed, func(c *fsmpb.Command) bool { return c.GetCheckpoint() != nil }) {
					t.Fatal("no checkpoint was written")
				}
			})
		})
	}
}

// TestCheckpointDueWhileClearInFlight: a checkpointed session whose
// renewal is clearing its checkpoint (the clear not yet applied) passes its
// next checkpoint time. The lessor neither checkpoints it meanwhile nor
// spins on it: the clock keeps advancing, the clear completes, and the
// renewal is granted.
func TestCheckpointDueWhileClearInFlight(t *testing.T) {
	// A spinning lessor never lets the bubble's clock advance: end the
	// test binary rather than hang until the test timeout.
	guard := time.AfterFunc(30*time.Second, func() {
		panic("the lessor spins while a clear is in flight: the manual clock never advanced past the checkpoint time")
	})
	defer guard.Stop()
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, func(c *Config) { c.CheckpointInterval = time.Second })
		release := make(chan struct{})
		r.p.holdCheckpoints(release, nil)
		r.l.Promote([]*fsmpb.Session{{LeaseId: "a", TtlMs: 10_000, Checkpointed: true, CheckpointRemainingMs: 5000, CheckpointGeneration: 1}}, nil)
		renewed := make(chan error, 1)
		go func() { _, err := r.l.RenewCommitted("a"); renewed <- err }()
		r.advanceTo(3 * time.Second) // past the checkpoint time (every 1 s)
		n := len(r.p.all())
		close(release)
		if err := <-renewed; err != nil {
			t.Fatalf("Renew = %v", err)
		}
		if n != 1 {
			t.Fatalf("%d proposals while the clear was in flight; want only the clear", n)
		}
		if rem, _ := r.l.Remaining("a"); rem <= 5*time.Second {
			t.Fatalf("after the renewal Remaining = %v; want the full TTL", rem)
		}
	})
}
