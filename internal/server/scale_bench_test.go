package server

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/admission"
	"github.com/leasehold/leasehold/internal/clock"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
	"github.com/leasehold/leasehold/internal/lessor"
	"github.com/prometheus/client_golang/prometheus"
)

// noProposer refuses every proposal: the benchmark below never lets a
// session come due.
type noProposer struct{}

func (noProposer) Propose(context.Context, *fsmpb.Command) (fsm.Result, error) {
	return fsm.Result{}, fmt.Errorf("benchmark: nothing is proposed")
}

// BenchmarkSessionSetupAtScale is the leader's in-memory work for one new
// session that takes a lock of its own, with 1000 to 100,000 such sessions
// already live, all of one principal: the per-principal session count
// (limits), CreateSession and Acquire applied to the state machine, and the
// lessor learning of the session from each result. The ns/op must stay
// flat as the live sessions grow; the log append, the fsync and the RPCs
// around it are per operation as well and are not included.
func BenchmarkSessionSetupAtScale(b *testing.B) {
	for _, live := range []int{1000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("live=%d", live), func(b *testing.B) {
			lim := admission.DefaultLimits()
			lim.SessionsPerPrincipal = 0 // set below, to live + b.N
			clk := clock.NewManual(time.Unix(1_700_000_000, 0))
			lcfg := lessor.DefaultConfig()
			lcfg.Clock, lcfg.Logger = clk, slog.New(slog.DiscardHandler)
			lcfg.Confirmer = soleLeader{}
			les, err := lessor.New(lcfg, noProposer{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(les.Close)
			les.Promote(nil, nil)
			flim := fsm.DefaultLimits()
			flim.MaxSessions = 1 << 30
			flim.MaxStateBytes = 0
			m := fsm.New(flim)
			var index uint64
			ended := func(ids []string) []string {
				var out []string
				for _, id := range ids {
					if m.Session(id) == nil {
						out = append(out, id)
					}
				}
				return out
			}
			var l *admission.Limiter
			ctx := context.Background()
			setup := func(i int) {
				id := fmt.Sprintf("%032x", i)
				done, err := l.ReserveSession(ctx, id, ended)
				if err != nil {
					b.Fatal(err)
				}
				index++
				res := m.Apply(index, &fsmpb.Command{Op: &fsmpb.Command_CreateSession{CreateSession: &fsmpb.CreateSession{LeaseId: id, Owner: "bench", TtlMs: 10_000}}})
				if res.Err != nil {
					b.Fatal(res.Err)
				}
				les.Observe(&res)
				done(false)
				index++
				res = m.Apply(index, &fsmpb.Command{Op: &fsmpb.Command_Acquire{Acquire: &fsmpb.Acquire{Name: "h/" + id, LeaseId: id}}})
				if res.Err != nil || res.Holding == nil {
					b.Fatalf("acquire: holding %v, err %v", res.Holding, res.Err)
				}
				les.Observe(&res)
			}
			lim.SessionsPerPrincipal = live + b.N + 1
			if l, err = admission.New(lim, clk, prometheus.NewRegistry()); err != nil {
				b.Fatal(err)
			}
			for i := range live {
				setup(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				setup(live + i)
			}
		})
	}
}

// soleLeader confirms every time: the leadership of a node alone.
type soleLeader struct{}

func (soleLeader) ConfirmLeadership(context.Context) error { return nil }
