package admission

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/api"
)

// TestShares: a principal runs at most its share of requests at once; the
// next ones wait, first in first out, and run as running ones end (or
// Yield); past the waiting bound one is refused at once; one that gives up
// waiting leaves nothing behind; other principals are not held up.
func TestShares(t *testing.T) {
	s := newShares(2, 2)
	ctx := t.Context()
	enter := func(p string) *ticket {
		t.Helper()
		tk, err := s.enter(ctx, p)
		if err != nil {
			t.Fatalf("enter %s: %v", p, err)
		}
		return tk
	}
	r1, r2 := enter("p"), enter("p")
	other := enter("q")
	got := make(chan int, 3)
	waiter := func(i int, ctx context.Context) {
		tk, err := s.enter(ctx, "p")
		if err != nil {
			got <- -i
			return
		}
		got <- i
		t.Cleanup(tk.leave)
	}
	go waiter(1, ctx)
	waitFor(t, func() bool { return s.queued("p") == 1 })
	gctx, giveUp := context.WithCancel(ctx)
	go waiter(2, gctx)
	waitFor(t, func() bool { return s.queued("p") == 2 })
	if _, err := s.enter(ctx, "p"); err == nil || err.Code != api.CodeResourceExhausted {
		t.Fatalf("a third waiting request: %v, want resource-exhausted", err)
	}
	giveUp()
	if i := <-got; i != -2 {
		t.Fatalf("answer %d, want the waiter that gave up (-2)", i)
	}
	select {
	case i := <-got:
		t.Fatalf("waiter %d ran while p runs its share", i)
	case <-time.After(50 * time.Millisecond):
	}
	r1.leave()
	r1.leave() // once only
	if i := <-got; i != 1 {
		t.Fatalf("answer %d, want the first waiter to run", i)
	}
	go waiter(3, ctx)
	waitFor(t, func() bool { return s.queued("p") == 1 })
	ctxY := context.WithValue(ctx, yieldKey{}, r2)
	Yield(ctxY) // r2 waits without working: its share goes on
	if i := <-got; i != 3 {
		t.Fatalf("answer %d, want waiter 3 to run once r2 yields", i)
	}
	r2.leave()
	other.leave()
	if _, ok := s.m["q"]; ok {
		t.Fatal("q's share is left behind")
	}
	unlimited := newShares(0, 0)
	for range 10 {
		if _, err := unlimited.enter(ctx, "p"); err != nil {
			t.Fatal(err)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// queued is the number of p's requests waiting.
func (s *shares) queued(p string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sh := s.m[p]; sh != nil {
		return sh.queue.Len()
	}
	return 0
}
