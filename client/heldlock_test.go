package client_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
)

// holdLocks has each session take a lock of its own (prefix + index),
// eight at a time.
func holdLocks(t testing.TB, sessions []*client.Session, prefix string) []*client.Lock {
	t.Helper()
	locks := make([]*client.Lock, len(sessions))
	eachOf(t, len(sessions), "try acquire", func(ctx context.Context, i int) (err error) {
		locks[i], err = sessions[i].TryAcquire(ctx, fmt.Sprintf("%s%d", prefix, i))
		return err
	})
	return locks
}

// TestHeldLockSessionCost: a session holding a lock costs its client at
// most 2 KiB and no goroutine: the Client's keeper tracks every session's
// safe deadline, and a lock's Done follows its session's without a
// goroutine of its own. The server runs in another process.
func TestHeldLockSessionCost(t *testing.T) {
	addr, _ := startServerProcess(t)
	c := dial(t, addr)
	const warm, n = 200, 2000 // many sessions: fixed costs (buffers, stack growth) spread thin
	sessions := createSessions(t, c, warm, time.Minute)
	defer func() { closeAll(sessions) }()
	locks := holdLocks(t, sessions, "cost:warm:")
	b0, g0 := liveBytes(), runtime.NumGoroutine()
	more := createSessions(t, c, n, time.Minute)
	sessions = append(sessions, more...)
	locks = append(locks, holdLocks(t, more, "cost:")...)
	b1, g1 := liveBytes(), runtime.NumGoroutine()
	perSession := (float64(b1) - float64(b0)) / n
	t.Logf("a session holding a lock: %.0f bytes, %d goroutines for %d sessions", perSession, g1-g0, n)
	if perSession > 2048 {
		t.Errorf("a session holding a lock costs %.0f bytes, want at most 2048", perSession)
	}
	if g1-g0 > 10 {
		t.Errorf("%d more sessions holding a lock started %d goroutines, want none per lock", n, g1-g0)
	}
	for _, l := range locks {
		if err := l.Context().Err(); err != nil {
			t.Fatalf("lock %s ended: %v", l.Name(), context.Cause(l.Context()))
		}
	}
}
