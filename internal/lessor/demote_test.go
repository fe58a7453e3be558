package lessor

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// TestDemoteWhileClearInFlight: a renewal of a checkpointed session is
// clearing its checkpoint when the leader loses leadership (and, in the
// second case, wins it again with other sessions). When the clear returns,
// the renewal is refused with ErrNotLeader, and the session's entry from
// the old term is put on no deadline heap: the lessor does not panic, and
// the new term's deadlines are its own.
func TestDemoteWhileClearInFlight(t *testing.T) {
	for _, repromote := range []bool{false, true} {
		t.Run(fmt.Sprintf("repromote=%v", repromote), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, func(c *Config) { c.CheckpointInterval = time.Second })
				release := make(chan struct{})
				r.p.holdCheckpoints(release, fmt.Errorf("%w: leadership lost", ErrNotApplied))
				// b and c come due before a, so a's entry is not at the
				// top of the heap (its index is above 0).
				r.l.Promote([]*fsmpb.Session{
					{LeaseId: "a", TtlMs: 10_000, Checkpointed: true, CheckpointRemainingMs: 5000, CheckpointGeneration: 1},
					{LeaseId: "b", TtlMs: 1000},
					{LeaseId: "c", TtlMs: 1000},
				}, nil)
				renewed := make(chan error, 1)
				panicked := make(chan any, 1)
				go func() {
					defer func() {
						if p := recover(); p != nil {
							panicked <- p
						}
					}()
					_, err := r.l.RenewCommitted("a")
					renewed <- err
				}()
				synctest.Wait() // the clear is in flight
				r.l.Demote()
				if repromote {
					r.l.Promote([]*fsmpb.Session{{LeaseId: "d", TtlMs: 10_000}}, nil)
				}
				close(release) // the clear fails, or Demote already cancelled it
				select {
				case p := <-panicked:
					t.Fatalf("Renew across a demotion panicked: %v", p)
				case err := <-renewed:
					if err == nil {
						t.Fatalf("Renew across a demotion succeeded; want a refusal")
					}
				}
				if !repromote {
					return
				}
				want := grantorDeadline(0, 10*time.Second)
				if rem, ok := r.l.Remaining("d"); !ok || rem != want {
					t.Fatalf("the new term's session: Remaining = %v, %v; want %v", rem, ok, want)
				}
				if _, ok := r.l.Remaining("a"); ok {
					t.Fatalf("the new term tracks a, which it was not promoted with")
				}
				r.l.mu.Lock()
				n := len(r.l.timers)
				r.l.mu.Unlock()
				if n != 1 {
					t.Fatalf("the new term's deadline heap holds %d entries; want only d's", n)
				}
			})
		})
	}
}

// holdCheckpoints makes every Checkpoint proposal wait until release is
// closed (then it returns err) or its ctx ends; other commands apply.
func (p *fakeProposer) holdCheckpoints(release <-chan struct{}, err error) {
	p.setRespond(func(ctx context.Context, _ int, cmd *fsmpb.Command) (fsm.Result, error) {
		if cmd.GetCheckpoint() == nil {
			return fsm.Result{}, nil
		}
		select {
		case <-release:
			return fsm.Result{}, err
		case <-ctx.Done():
			return fsm.Result{}, ctx.Err()
		}
	})
}
