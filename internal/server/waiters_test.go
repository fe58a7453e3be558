package server_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// A session waits for a name once: while its request waits in the queue,
// other wait ids of the session for the name are refused at once
// (resource-exhausted, nothing proposed), and retries of the waiting
// request (its wait id) wait beside it. When the name is granted, the
// request and every retry get the grant at once (one holding, one token),
// and none waits out its deadline for an event that was dropped or never
// meant for it.
func TestEveryQueuedRequestLearnsItsOutcome(t *testing.T) {
	t.Parallel()
	c, a, b, ha := heldAndWanted(t, "crowded")
	ctx := ctxT(t)

	const retries = 4
	type outcome struct {
		h   *pb.Holding
		err error
	}
	results := make(chan outcome, retries+1)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r := c.Server().Node().Raft()
	start := r.AppliedIndex()
	for i := range retries + 1 {
		before := r.AppliedIndex()
		go func() {
			resp, err := c.Client.Acquire(wctx, req(&pb.AcquireRequest{Name: "crowded", LeaseId: b.GetLeaseId(), WaitId: 100}))
			o := outcome{err: err}
			if err == nil {
				o.h = resp.Msg.GetHolding()
			}
			results <- o
		}()
		if i == 0 {
			mustOK(t, "applied", servertest.Eventually(5*time.Second, func() bool { return r.AppliedIndex() > before }))
			waitQueued(t, c.Client, "crowded", b.GetLeaseId())
		}
	}
	// Each request, retries too, is one Acquire entry: once all are
	// applied, the state stands still until the name is released.
	mustOK(t, "every retry applied", servertest.Eventually(5*time.Second, func() bool { return r.AppliedIndex() >= start+retries+1 }))
	// The applied index counts other entries too: wait until the state
	// stands still, so that a retry applied late is not taken for a change
	// made by the refused requests below.
	before := c.State()
	mustOK(t, "state settled", servertest.Eventually(5*time.Second, func() bool {
		time.Sleep(100 * time.Millisecond)
		now := c.State()
		settled := bytes.Equal(before, now)
		before = now
		return settled
	}))
	for id := range uint64(5) {
		_, err := c.Client.Acquire(wctx, req(&pb.AcquireRequest{Name: "crowded", LeaseId: b.GetLeaseId(), WaitId: 200 + id}))
		if api.CodeOf(err) != api.CodeResourceExhausted || !strings.Contains(err.Error(), "wait id 100") {
			t.Fatalf("another wait id of the waiting session: %v (code %s), want resource-exhausted naming wait id 100", err, api.CodeOf(err))
		}
	}
	if !bytes.Equal(before, c.State()) { // a retry of wait id 100 changes nothing either
		t.Fatal("the refused requests changed the state")
	}
	_, err := c.Client.Release(ctx, req(&pb.ReleaseRequest{Name: "crowded", LeaseId: a.GetLeaseId(), Token: ha.GetToken()}))
	mustOK(t, "Release", err)
	var token uint64
	for i := range retries + 1 {
		select {
		case o := <-results:
			if o.err != nil || o.h.GetLeaseId() != b.GetLeaseId() || (token != 0 && o.h.GetToken() != token) {
				t.Fatalf("request %d: holding %v, error %v; want the one grant", i, o.h, o.err)
			}
			token = o.h.GetToken()
		case <-time.After(10 * time.Second):
			t.Fatalf("a queued request got no answer after the grant (%d answered so far)", i)
		}
	}
}

// heldAndWanted starts a server with two 60 s sessions, A holding name
// (holding ha) and B free to want it.
func heldAndWanted(t *testing.T, name string) (c *servertest.Cluster, a, b *pb.CreateSessionResponse, ha *pb.Holding) {
	t.Helper()
	c = servertest.Start(t, servertest.Options{})
	a = newSession(t, c.Client, 60_000, "A")
	b = newSession(t, c.Client, 60_000, "B")
	return c, a, b, acquire(t, c.Client, name, a.GetLeaseId())
}

// TestSecondWaitsEndAtOnce: a session has one queued request per name.
// Of many concurrent Acquires of one session for a name, each with a
// wait id of its own, one stands in the queue; the others are refused
// before they are proposed (resource-exhausted; a request that reached
// the leader through another node, whose parked Acquires this one does
// not see, would replace the standing one instead, which is then answered
// at once: unavailable). None is held until its deadline: one session
// cannot pile up handlers.
func TestSecondWaitsEndAtOnce(t *testing.T) {
	t.Parallel()
	c, _ := startManual(t, servertest.Options{})
	holder := newSession(t, c.Client, 60_000, "holder")
	acquire(t, c.Client, "busy", holder.GetLeaseId())
	w := newSession(t, c.Client, 60_000, "waiter")
	const n = 50
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	answered := make(chan error, n)
	for i := range n {
		go func() {
			_, err := c.Client.Acquire(ctx, req(&pb.AcquireRequest{Name: "busy", LeaseId: w.GetLeaseId(), WaitId: uint64(1000 + i)}))
			answered <- err
		}()
	}
	timeout := time.After(20 * time.Second)
	for range n - 1 {
		select {
		case err := <-answered:
			if code := api.CodeOf(err); code != api.CodeUnavailable && code != api.CodeResourceExhausted {
				t.Fatalf("a second request: %v, want resource-exhausted (refused) or unavailable (replaced)", err)
			}
		case <-timeout:
			t.Fatal("second requests still wait: each keeps a handler until its deadline")
		}
	}
	select {
	case err := <-answered:
		t.Fatalf("the standing request ended while the name is still held: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if ws := waiters(status(t, c.Client, "busy")); len(ws) != 1 {
		t.Fatalf("queue %v, want the waiter's one entry", ws)
	}
}

// An Acquire that reaches the leader after its wait id was withdrawn
// (CancelWait applied first: the request was delayed, or its caller gave
// up before sending it again) is refused with canceled and leaves no
// queue entry; the session's next Acquire, with a new wait id, queues.
func TestAcquireAfterItsWithdrawal(t *testing.T) {
	t.Parallel()
	c, _, b, _ := heldAndWanted(t, "late")
	ctx := ctxT(t)
	_, err := c.Client.CancelWait(ctx, req(&pb.CancelWaitRequest{Name: "late", LeaseId: b.GetLeaseId(), WaitId: 77}))
	mustOK(t, "CancelWait before the Acquire", err)
	_, err = c.Client.Acquire(ctx, req(&pb.AcquireRequest{Name: "late", LeaseId: b.GetLeaseId(), WaitId: 77, WaitMs: 5000}))
	wantCode(t, "the Acquire after its withdrawal", err, api.CodeCanceled)
	if ws := waiters(status(t, c.Client, "late")); len(ws) != 0 {
		t.Fatalf("queue %v after the refused Acquire, want none", ws)
	}
	_, err = c.Client.Acquire(ctx, req(&pb.AcquireRequest{Name: "late", LeaseId: b.GetLeaseId(), WaitId: 78, WaitMs: 100}))
	wantCode(t, "the next Acquire, with a new wait id", err, api.CodeDeadlineExceeded)
}
