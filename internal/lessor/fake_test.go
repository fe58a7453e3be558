package lessor

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/internal/clock"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// fakeProposer is a Proposer that records every command with the manual
// time it was proposed at. Its outcome is success unless respond says
// otherwise.
type fakeProposer struct {
	clk *clock.Manual

	mu       sync.Mutex // protects following
	proposed []proposal
	// respond, when set, decides the outcome of the n-th proposal (from 0).
	// It may block; it must return when ctx ends.
	respond func(ctx context.Context, n int, cmd *fsmpb.Command) (fsm.Result, error)
}

type proposal struct {
	at  time.Time
	cmd *fsmpb.Command
}

func (p *fakeProposer) Propose(ctx context.Context, cmd *fsmpb.Command) (fsm.Result, error) {
	p.mu.Lock()
	n := len(p.proposed)
	p.proposed = append(p.proposed, proposal{at: p.clk.Now(), cmd: cmd})
	respond := p.respond
	p.mu.Unlock()
	if respond != nil {
		return respond(ctx, n, cmd)
	}
	return fsm.Result{}, nil
}

func (p *fakeProposer) setRespond(f func(ctx context.Context, n int, cmd *fsmpb.Command) (fsm.Result, error)) {
	p.mu.Lock()
	p.respond = f
	p.mu.Unlock()
}

// all returns the proposals so far.
func (p *fakeProposer) all() []proposal {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]proposal(nil), p.proposed...)
}

// expires returns the lease ids of the Expire commands proposed so far.
func (p *fakeProposer) expires() []string {
	var out []string
	for _, pr := range p.all() {
		if e := pr.cmd.GetExpire(); e != nil {
			out = append(out, e.GetLeaseId())
		}
	}
	return out
}

// delayEnds returns the EndLockDelay commands proposed so far.
func (p *fakeProposer) delayEnds() []proposal {
	var out []proposal
	for _, pr := range p.all() {
		if pr.cmd.GetEndLockDelay() != nil {
			out = append(out, pr)
		}
	}
	return out
}

// rig is a Lessor on a manual clock with a fake proposer. It must be built
// and used inside a synctest bubble: advance waits, after each step of the
// clock, until every goroutine of the lessor is blocked again, so a test
// sees the complete effect of each tick.
type rig struct {
	t     *testing.T
	clk   *clock.Manual
	p     *fakeProposer
	l     *Lessor
	start time.Time
	tick  time.Duration
}

var discard = slog.New(slog.DiscardHandler)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newRig(t *testing.T, mutate func(*Config)) *rig {
	t.Helper()
	clk := clock.NewManual(epoch)
	cfg := DefaultConfig()
	cfg.Clock = clk
	cfg.Tick = 10 * time.Millisecond
	cfg.Grace = 0
	cfg.Logger = discard
	cfg.CheckpointInterval = 0 // tests of checkpoints turn them on
	cfg.Confirmer = confirmed
	if mutate != nil {
		mutate(&cfg)
	}
	p := &fakeProposer{clk: clk}
	l, err := New(cfg, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return &rig{t: t, clk: clk, p: p, l: l, start: epoch, tick: cfg.Tick}
}

// now is the manual clock's offset from the start.
func (r *rig) now() time.Duration { return r.clk.Now().Sub(r.start) }

// advanceTo moves the clock to start+at in steps of at most one tick.
func (r *rig) advanceTo(at time.Duration) {
	r.t.Helper()
	if at < r.now() {
		r.t.Fatalf("advanceTo(%v): the clock is already at %v", at, r.now())
	}
	synctest.Wait()
	for r.now() < at {
		r.clk.Advance(min(r.tick, at-r.now()))
		synctest.Wait()
	}
}

// session is an applied CreateSession of lease with ttl, as Observe sees it.
func session(lease string, ttl time.Duration) *fsm.Result {
	return &fsm.Result{Session: &fsmpb.Session{LeaseId: lease, TtlMs: ttl.Milliseconds()}}
}

// grantorDeadline is answered + ttl·(1+drift) for the default drift.
func grantorDeadline(answered, ttl time.Duration) time.Duration {
	return answered + ttl + time.Duration(float64(ttl)*DefaultConfig().Drift)
}

// confirmFunc is a Confirmer.
type confirmFunc func(ctx context.Context) error

func (f confirmFunc) ConfirmLeadership(ctx context.Context) error { return f(ctx) }

// confirmed confirms every time: a leader whose quorum answers.
var confirmed = confirmFunc(func(context.Context) error { return nil })
