package admission

import (
	"context"
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/internal/clock"
	"github.com/prometheus/client_golang/prometheus"
)

// TestReserveSessionRefusalIsConstant counts the session ids the
// per-principal session count looks up: creating sessions and refusing
// one past the limit must look up none, however many are live (each
// refusal looked up every session of the principal, under the limiter's
// lock every request takes: 10,000 look-ups per refusal at the default).
// A session that ended gives its place back.
func TestReserveSessionRefusalIsConstant(t *testing.T) {
	const n = 10_000
	cfg := DefaultLimits()
	cfg.SessionsPerPrincipal = n
	l, err := New(cfg, clock.Real{}, prometheus.NewRegistry())
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
		done, err := l.ReserveSession(ctx, fmt.Sprintf("s%d", i), ended)
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		done(false)
	}
	for i := range 100 {
		if _, err := l.ReserveSession(ctx, fmt.Sprintf("more%d", i), ended); err == nil {
			t.Fatalf("session %d of a principal with a limit of %d was admitted", n+1, n)
		}
	}
	if looked != 0 {
		t.Fatalf("creating %d sessions and refusing 100 looked up %d ids, want none", n, looked)
	}

	l.SessionsEnded([]string{"s7"})
	done, err := l.ReserveSession(ctx, "after-end", ended)
	if err != nil {
		t.Fatalf("a place given back by an ended session: %v", err)
	}
	done(false)

	// A CreateSession that failed without creating gives its place back.
	l.SessionsEnded([]string{"s8"})
	done, err = l.ReserveSession(ctx, "failed", ended)
	if err != nil {
		t.Fatal(err)
	}
	done(true) // ended says it is live: it was created after all
	if _, err := l.ReserveSession(ctx, "x", ended); err == nil {
		t.Fatal("a failed CreateSession whose session is live gave its place back")
	}
	notLive := func(ids []string) []string { return ids }
	l.SessionsEnded([]string{"s9"})
	done, err = l.ReserveSession(ctx, "failed2", notLive)
	if err != nil {
		t.Fatal(err)
	}
	done(true)
	if done, err := l.ReserveSession(ctx, "y", ended); err != nil {
		t.Fatalf("a failed CreateSession kept its place: %v", err)
	} else {
		done(false)
	}

	// After a snapshot replaced the state, the sessions it ended unseen
	// are found once.
	l.Restored()
	gone := func(ids []string) []string { return ids[:1] }
	done, err = l.ReserveSession(ctx, "after-restore", gone)
	if err != nil {
		t.Fatalf("after a restore that ended a session: %v", err)
	}
	done(false)
}
