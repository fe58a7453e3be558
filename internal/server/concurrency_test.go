package server_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// Status and List build their answers from copies of the state: queue
// entries changing under them (acquires giving up, re-acquires) are no
// data race. Run with -race; the load is bounded to one second.
func TestReadsWhileQueueChanges(t *testing.T) {
	c := servertest.Start(t, servertest.Options{})
	ctx := ctxT(t)
	holder := newSession(t, c.Client, 10000, "h")
	acquire(t, c.Client, "x", holder.GetLeaseId())
	var wg sync.WaitGroup
	until := time.Now().Add(time.Second)
	for range 4 {
		s := newSession(t, c.Client, 10000, "w")
		wg.Go(func() {
			for time.Now().Before(until) {
				actx, cancel := context.WithTimeout(ctx, 3*time.Millisecond)
				_, _ = c.Client.Acquire(actx, req(&pb.AcquireRequest{Name: "x", LeaseId: s.GetLeaseId()}))
				cancel()
			}
		})
	}
	wg.Go(func() {
		for time.Now().Before(until) {
			if _, err := c.Client.Status(ctx, req(&pb.StatusRequest{Name: "x"})); err != nil {
				t.Errorf("status: %v", err)
				return
			}
			if _, err := c.Client.List(ctx, req(&pb.ListRequest{})); err != nil {
				t.Errorf("list: %v", err)
				return
			}
		}
	})
	wg.Wait()
}

// Two Acquires of one name by one session: the outcome of one request's
// queue entry (withdrawn when it gave up) is never taken for the other's,
// so the second never reports lease-expired for a live session and never
// leaves its entry behind. The second request is sent once the first is
// queued (while it waits, the second is refused, resource-exhausted; once
// it gave up, the second waits), at offsets that straddle the first one's
// give-up.
func TestConcurrentWaitsOfOneSession(t *testing.T) {
	c := servertest.Start(t, servertest.Options{})
	ctx := ctxT(t)
	holder := newSession(t, c.Client, 60000, "h")
	acquire(t, c.Client, "x", holder.GetLeaseId())
	for i := range 60 {
		s := newSession(t, c.Client, 60000, "w")
		first := async(func() error {
			actx, cancel := context.WithTimeout(ctx, 15*time.Millisecond)
			defer cancel()
			_, err := c.Client.Acquire(actx, req(&pb.AcquireRequest{Name: "x", LeaseId: s.GetLeaseId()}))
			return err
		})
		var firstErr error
		firstDone := false
		for !firstDone && !slices.Contains(waiters(status(t, c.Client, "x")), s.GetLeaseId()) {
			select {
			case firstErr = <-first:
				firstDone = true
			default:
			}
		}
		time.Sleep(time.Duration(i%20) * time.Millisecond) // straddle the first request's give-up
		actx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err2 := c.Client.Acquire(actx, req(&pb.AcquireRequest{Name: "x", LeaseId: s.GetLeaseId()}))
		cancel()
		if !firstDone {
			firstErr = <-first
		}
		if firstErr == nil {
			t.Fatalf("iteration %d: the first Acquire was granted a held lock", i)
		}
		if code := api.CodeOf(err2); code != api.CodeDeadlineExceeded && code != api.CodeResourceExhausted {
			t.Fatalf("iteration %d: the second Acquire got %s (%v); want deadline-exceeded (the lock stays held) or resource-exhausted (the first still waits)", i, code, err2)
		}
		_, err := c.Client.CloseSession(ctx, req(&pb.CloseSessionRequest{LeaseId: s.GetLeaseId()}))
		mustOK(t, "close session", err)
	}
	if w := waiters(status(t, c.Client, "x")); len(w) != 0 {
		t.Fatalf("queue entries left behind: %v", w)
	}
}
