package lessor

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/clock"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// TestClearInFlightDoesNotStopTicks: a checkpointed session whose next
// checkpoint comes due while a renewal's clear is still in flight gets no
// checkpoint until the clear completes; the ticks go on to decide every
// other session. (The lessor used to put the session back on its heap at the
// same past time and pop it again, forever, holding its mutex.)
//
// The test runs on real time (no synctest bubble) so that a lessor stuck
// in such a loop fails it after a bound instead of hanging it.
func TestClearInFlightDoesNotStopTicks(t *testing.T) {
	clk := clock.NewManual(epoch)
	cfg := DefaultConfig()
	cfg.Confirmer = confirmed
	cfg.Clock, cfg.Logger, cfg.Tick, cfg.Grace, cfg.CheckpointInterval = clk, discard, 10*time.Millisecond, 0, time.Second
	release := make(chan struct{})
	p := &fakeProposer{clk: clk}
	p.setRespond(func(_ context.Context, _ int, cmd *fsmpb.Command) (fsm.Result, error) {
		if cmd.GetCheckpoint() != nil {
			<-release // the clear stays in flight until the test ends
		}
		return fsm.Result{}, nil
	})
	l, err := New(cfg, p)
	if err != nil {
		t.Fatal(err)
	}
	// Both sessions are checkpointed: each has its next checkpoint 1 s
	// after the promotion; b's deadline (1.2 s·1.02) comes soon after.
	l.Promote([]*fsmpb.Session{
		{LeaseId: "a", TtlMs: 10_000, Checkpointed: true, CheckpointRemainingMs: 5000},
		{LeaseId: "b", TtlMs: 10_000, Checkpointed: true, CheckpointRemainingMs: 1200},
	}, nil)
	renewed := make(chan error, 1)
	go func() { // ends when release is closed
		_, err := l.RenewCommitted("a")
		renewed <- err
	}()
	waitFor(t, "the clear of a proposed", func() bool { return len(p.all()) == 1 })

	// Move the clock a tick per poll (the loop may not be waiting on the
	// clock yet): a's checkpoint comes due at 1 s, b's deadline soon after.
	waitFor(t, "the Expire of b proposed", func() bool {
		clk.Advance(cfg.Tick)
		return slices.Contains(p.expires(), "b")
	})

	close(release)
	if err := <-renewed; err != nil {
		t.Errorf("Renew(a) after its clear applied: %v", err)
	}
	l.Close()
}

// waitFor polls cond for up to 30 s of real time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("not within 30 s: %s", what)
		case <-tick.C:
		}
	}
}
