package server

import (
	"context"
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/internal/clock"
	"github.com/prometheus/client_golang/prometheus"
)

// TestReserveSessionSweepIsAmortized counts the session ids the
// per-principal session count looks up while one principal creates many
// live sessions: the sweep of ended sessions must cost a bounded number of
// look-ups per created session, however many sessions are live (it was a
// walk of every live session per 4096 created, so the work per session grew
// with their number and 100,000 sessions paid 12 look-ups each).
func TestReserveSessionSweepIsAmortized(t *testing.T) {
	const n = 100_000
	cfg := DefaultLimits()
	cfg.SessionsPerPrincipal = n
	l, err := newLimiter(cfg, clock.Real{}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	looked := 0
	ended := func(ids []string) []string { // every session stays live
		looked += len(ids)
		return nil
	}
	ctx := context.Background()
	for i := range n {
		done, err := l.reserveSession(ctx, fmt.Sprintf("s%d", i), ended)
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		done()
	}
	if max := 2*n + 4096; looked > max {
		t.Fatalf("creating %d live sessions looked up %d ids (%.1f per session), want at most %d", n, looked, float64(looked)/n, max)
	}
	if _, err := l.reserveSession(ctx, "one-more", ended); err == nil {
		t.Fatalf("session %d of a principal with a limit of %d was admitted", n+1, n)
	}
}
