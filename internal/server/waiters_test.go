package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// Many queued requests of one session for one name (each newer one takes
// over the session's place in the queue): when the name is granted, every
// one of them gets an answer at once — the grant (one holding) for the
// newest, "not holding" for those it replaced — and none waits out its
// deadline for an event that was dropped or never meant for it.
func TestEveryQueuedRequestLearnsItsOutcome(t *testing.T) {
	t.Parallel()
	c, a, b, ha := heldAndWanted(t, "crowded")
	ctx := ctxT(t)

	const n = 6
	type outcome struct {
		waitID uint64
		h      *pb.Holding
		err    error
	}
	results := make(chan outcome, n)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r := c.Server().Node().Raft()
	for i := range n {
		waitID := uint64(100 + i)
		before := r.AppliedIndex()
		go func() {
			resp, err := c.Client.Acquire(wctx, req(&pb.AcquireRequest{Name: "crowded", LeaseId: b.GetLeaseId(), WaitId: waitID}))
			o := outcome{waitID: waitID, err: err}
			if err == nil {
				o.h = resp.Msg.GetHolding()
			}
			results <- o
		}()
		// The next request replaces this one only once it is applied.
		mustOK(t, "applied", servertest.Eventually(5*time.Second, func() bool { return r.AppliedIndex() > before }))
	}
	waitQueued(t, c.Client, "crowded", b.GetLeaseId())
	_, err := c.Client.Release(ctx, req(&pb.ReleaseRequest{Name: "crowded", LeaseId: a.GetLeaseId(), Token: ha.GetToken()}))
	mustOK(t, "Release", err)
	granted := 0
	var token uint64
	for range n {
		select {
		case o := <-results:
			switch {
			case o.err == nil && o.h.GetLeaseId() == b.GetLeaseId() && (token == 0 || o.h.GetToken() == token):
				granted++
				token = o.h.GetToken()
			case api.CodeOf(o.err) == api.CodeUnavailable:
			default:
				t.Errorf("request %d: holding %v, error %v (code %s); want the grant or unavailable", o.waitID, o.h, o.err, api.CodeOf(o.err))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("a queued request got no answer after the grant (%d granted so far)", granted)
		}
	}
	// One holding; more than one request reports it only when a request
	// was applied after the grant (then it is the re-entrant answer).
	if granted == 0 {
		t.Fatal("no request was told it holds the name")
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

// TestReplacedWaitsEndAtOnce: a session has one queued request per name, so
// each Acquire with a new wait id replaces the one before it in the state.
// The replaced requests are answered at once (unavailable: replaced), not
// held until their deadlines: one session cannot pile up handlers.
func TestReplacedWaitsEndAtOnce(t *testing.T) {
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
	// All but the request whose wait id the state holds now end by
	// themselves, long before their 60 s deadline.
	timeout := time.After(20 * time.Second)
	for range n - 1 {
		select {
		case err := <-answered:
			if api.CodeOf(err) != api.CodeUnavailable {
				t.Fatalf("a replaced request: %v, want unavailable", err)
			}
		case <-timeout:
			t.Fatal("replaced requests still wait: each keeps a handler until its deadline")
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
