package lessor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/clock"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// benchLessor is a Lessor on a manual clock, closed when b ends.
func benchLessor(b *testing.B) *Lessor {
	clk := clock.NewManual(epoch)
	cfg := DefaultConfig()
	cfg.Confirmer = confirmed
	cfg.Clock, cfg.Logger = clk, discard
	l, err := New(cfg, &fakeProposer{clk: clk})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(l.Close)
	return l
}

// BenchmarkRenewMany is the lessor's side of a batched renewal: ns per
// session renewed in memory, batches of 1000.
func BenchmarkRenewMany(b *testing.B) {
	l := benchLessor(b)
	const n = 1000
	var sessions []*fsmpb.Session
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%032x", i)
		sessions = append(sessions, &fsmpb.Session{LeaseId: ids[i], TtlMs: 10_000})
	}
	l.Promote(sessions, nil)
	out := make([]Renewal, n)
	ctx := context.Background()
	for b.Loop() {
		l.RenewMany(ctx, ids, out)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/renewal")
}

// BenchmarkIdleTick is one tick of a leader with 100,000 idle sessions:
// the deadline heap makes it independent of the number of sessions.
func BenchmarkIdleTick(b *testing.B) {
	l := benchLessor(b)
	var sessions []*fsmpb.Session
	for i := range 100_000 {
		sessions = append(sessions, &fsmpb.Session{LeaseId: fmt.Sprintf("%032x", i), TtlMs: time.Hour.Milliseconds()})
	}
	l.Promote(sessions, nil)
	for b.Loop() {
		if e, cmds := l.due(); len(e)+len(cmds) != 0 {
			b.Fatal("an idle session came due")
		}
	}
}
