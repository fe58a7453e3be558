package server_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

type acquired struct {
	resp *pb.AcquireResponse
	err  error
}

// acquireAsync starts a blocking Acquire and returns its outcome channel.
func acquireAsync(ctx context.Context, c client, m *pb.AcquireRequest) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		resp, err := c.Acquire(ctx, connect.NewRequest(m))
		var msg *pb.AcquireResponse
		if resp != nil {
			msg = resp.Msg
		}
		ch <- acquired{msg, err}
	}()
	return ch
}

func recv(t *testing.T, what string, ch <-chan acquired) acquired {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer", what)
		return acquired{}
	}
}

// pending reports whether the call behind ch has not answered yet.
func pending(ch <-chan acquired) bool { return len(ch) == 0 }

// TestQueueFIFO: waiters are granted in arrival order, each in the same
// step as the release, with the next token; Release reports the grant.
func TestQueueFIFO(t *testing.T) {
	t.Parallel()
	c, _ := startManual(t, servertest.Options{})
	cl := c.Client
	a := newSession(t, cl, 60_000, "A")
	hA := acquire(t, cl, "q", a.GetLeaseId())

	type waiter struct {
		s  *pb.CreateSessionResponse
		ch <-chan acquired
	}
	var ws []waiter
	var queued []string
	for _, owner := range []string{"B", "C", "D"} {
		s := newSession(t, cl, 60_000, owner)
		ch := acquireAsync(ctxT(t), cl, &pb.AcquireRequest{Name: "q", LeaseId: s.GetLeaseId()})
		queued = append(queued, s.GetLeaseId())
		waitQueued(t, cl, "q", queued...) // arrival order is the order we queue in
		ws = append(ws, waiter{s, ch})
	}
	if info := status(t, cl, "q"); info.GetWaiters()[0].GetOwner() != "B" {
		t.Fatalf("waiter owners %v", info.GetWaiters())
	}

	prevLease, prevToken := a.GetLeaseId(), hA.GetToken()
	for i, w := range ws {
		rel, err := cl.Release(ctxT(t), req(&pb.ReleaseRequest{Name: "q", LeaseId: prevLease, Token: prevToken}))
		mustOK(t, "Release", err)
		next := rel.Msg.GetNext()
		if next.GetLeaseId() != w.s.GetLeaseId() || next.GetToken() != prevToken+1 || next.GetOwner() != w.s.GetOwner() || next.GetName() != "q" {
			t.Fatalf("release %d: next %v, want %s (%s) with token %d", i, next, w.s.GetLeaseId(), w.s.GetOwner(), prevToken+1)
		}
		got := recv(t, "waiter "+w.s.GetOwner(), w.ch)
		if got.err != nil || got.resp.GetHolding().GetToken() != next.GetToken() || got.resp.GetTtlMs() != 60_000 {
			t.Fatalf("waiter %s: %v %v, want token %d", w.s.GetOwner(), got.resp, got.err, next.GetToken())
		}
		for _, later := range ws[i+1:] {
			if !pending(later.ch) {
				t.Fatalf("waiter %s answered before its turn", later.s.GetOwner())
			}
		}
		if h := status(t, cl, "q").GetHolder(); h.GetLeaseId() != w.s.GetLeaseId() {
			t.Fatalf("holder %v, want %s", h, w.s.GetOwner())
		}
		prevLease, prevToken = w.s.GetLeaseId(), next.GetToken()
	}
	rel, err := cl.Release(ctxT(t), req(&pb.ReleaseRequest{Name: "q", LeaseId: prevLease, Token: prevToken}))
	mustOK(t, "last Release", err)
	if rel.Msg.GetNext() != nil {
		t.Fatalf("release with an empty queue reports next %v", rel.Msg.GetNext())
	}
	if info := status(t, cl, "q"); info.GetHolder() != nil || len(info.GetWaiters()) != 0 {
		t.Fatalf("lock not free after the last release: %v", info)
	}
}

// TestQueueLeave: a waiter leaves the queue when its wait_ms runs out, when
// its caller cancels, and when its session ends; the lock stays with its
// holder and a later release finds nobody to hand it to.
func TestQueueLeave(t *testing.T) {
	t.Parallel()
	c, clk := startManual(t, servertest.Options{})
	cl := c.Client
	a := newSession(t, cl, 3_600_000, "A")
	hA := acquire(t, cl, "n", a.GetLeaseId())

	t.Run("wait_ms", func(t *testing.T) {
		b := newSession(t, cl, 3_600_000, "B")
		ch := acquireAsync(ctxT(t), cl, &pb.AcquireRequest{Name: "n", LeaseId: b.GetLeaseId(), WaitMs: 2000})
		waitQueued(t, cl, "n", b.GetLeaseId())
		var got acquired
		// The server's wait timer runs on the manual clock; it starts a moment
		// after the entry is queued, so keep advancing until it fires.
		moved := time.Duration(0)
		err := servertest.Eventually(10*time.Second, func() bool {
			select {
			case got = <-ch:
				return true
			default:
				clk.Advance(250 * time.Millisecond)
				moved += 250 * time.Millisecond
				return false
			}
		})
		if err != nil {
			t.Fatal("the queued Acquire did not time out")
		}
		if moved < 2000*time.Millisecond {
			t.Fatalf("wait_ms 2000 timed out after %v", moved)
		}
		wantCode(t, "Acquire past wait_ms", got.err, api.CodeDeadlineExceeded)
		if w := waiters(status(t, cl, "n")); len(w) != 0 {
			t.Fatalf("waiters after the timeout: %v", w)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		b := newSession(t, cl, 3_600_000, "B")
		ctx, cancel := context.WithCancel(ctxT(t))
		ch := acquireAsync(ctx, cl, &pb.AcquireRequest{Name: "n", LeaseId: b.GetLeaseId()})
		waitQueued(t, cl, "n", b.GetLeaseId())
		cancel()
		if got := recv(t, "cancelled Acquire", ch); !errors.Is(got.err, context.Canceled) && connect.CodeOf(got.err) != connect.CodeCanceled {
			t.Fatalf("cancelled Acquire returned %v", got.err)
		}
		waitQueued(t, cl, "n") // the server withdraws the entry
	})

	t.Run("session closed", func(t *testing.T) {
		b := newSession(t, cl, 3_600_000, "B")
		ch := acquireAsync(ctxT(t), cl, &pb.AcquireRequest{Name: "n", LeaseId: b.GetLeaseId()})
		waitQueued(t, cl, "n", b.GetLeaseId())
		_, err := cl.CloseSession(ctxT(t), req(&pb.CloseSessionRequest{LeaseId: b.GetLeaseId()}))
		mustOK(t, "CloseSession", err)
		wantCode(t, "Acquire of a closed session", recv(t, "Acquire", ch).err, api.CodeLeaseExpired)
		if w := waiters(status(t, cl, "n")); len(w) != 0 {
			t.Fatalf("waiters after CloseSession: %v", w)
		}
	})

	t.Run("session expired", func(t *testing.T) {
		b := newSession(t, cl, 1000, "B")
		ch := acquireAsync(ctxT(t), cl, &pb.AcquireRequest{Name: "n", LeaseId: b.GetLeaseId()})
		waitQueued(t, cl, "n", b.GetLeaseId())
		var got acquired
		c.AdvanceUntil("the waiter's session to expire", func() bool {
			select {
			case got = <-ch:
				return true
			default:
				return false
			}
		})
		wantCode(t, "Acquire of an expired session", got.err, api.CodeLeaseExpired)
		if w := waiters(status(t, cl, "n")); len(w) != 0 {
			t.Fatalf("waiters after expiry: %v", w)
		}
	})

	if h := status(t, cl, "n").GetHolder(); h.GetLeaseId() != a.GetLeaseId() || h.GetToken() != hA.GetToken() {
		t.Fatalf("holder %v, want A with token %d", h, hA.GetToken())
	}
	rel, err := cl.Release(ctxT(t), req(&pb.ReleaseRequest{Name: "n", LeaseId: a.GetLeaseId(), Token: hA.GetToken()}))
	mustOK(t, "Release", err)
	if rel.Msg.GetNext() != nil {
		t.Fatalf("a waiter that left was granted the lock: %v", rel.Msg.GetNext())
	}
}

// TestTryAcquire: locked while held, lock-delay after the holder expired
// (for delay·(1+drift)), free after.
func TestTryAcquire(t *testing.T) {
	t.Parallel()
	c, _ := startManual(t, servertest.Options{})
	cl := c.Client
	a := newSession(t, cl, 1000, "A")
	b := newSession(t, cl, 3_600_000, "B")
	tryB := func() (*pb.TryAcquireResponse, error) {
		resp, err := cl.TryAcquire(ctxT(t), req(&pb.TryAcquireRequest{Name: "d", LeaseId: b.GetLeaseId()}))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}

	resp, err := cl.TryAcquire(ctxT(t), req(&pb.TryAcquireRequest{Name: "d", LeaseId: a.GetLeaseId(), LockDelayMs: 5000}))
	mustOK(t, "TryAcquire by A", err)
	tA := resp.Msg.GetHolding().GetToken()
	if resp.Msg.GetHolding().GetLockDelayMs() != 5000 || resp.Msg.GetTtlMs() != 1000 {
		t.Fatalf("TryAcquire response %v", resp.Msg)
	}
	_, err = tryB()
	wantCode(t, "TryAcquire of a held lock", err, api.CodeLocked)

	c.AdvanceUntil("A to expire", func() bool { return status(t, cl, "d").GetHolder() == nil })
	if info := status(t, cl, "d"); !info.GetDelayed() {
		t.Fatalf("after A expired the lock is not in lock-delay: %v", info)
	}
	_, err = tryB()
	wantCode(t, "TryAcquire in lock-delay", err, api.CodeLockDelay)

	var got *pb.TryAcquireResponse
	moved := c.AdvanceUntil("the lock-delay to end", func() bool {
		got, err = tryB()
		return err == nil
	})
	drift := c.Config().Lessor.Drift
	minDelay := 5*time.Second + time.Duration(float64(5*time.Second)*drift) - c.Config().Lessor.Tick
	if moved < minDelay {
		t.Fatalf("lock-delay of 5 s ended after %v, want at least %v", moved, minDelay)
	}
	if got.GetHolding().GetToken() <= tA || status(t, cl, "d").GetDelayed() {
		t.Fatalf("after the lock-delay B got %v (A had token %d)", got.GetHolding(), tA)
	}
}

// TestKeepAlive: unary and streamed keepalives hold a session past its
// TTL; without them it expires; unknown leases are lease-expired.
func TestKeepAlive(t *testing.T) {
	t.Parallel()
	c, clk := startManual(t, servertest.Options{})
	cl := c.Client

	unary := newSession(t, cl, 1000, "unary")
	streamed := newSession(t, cl, 1000, "streamed")
	acquire(t, cl, "ka:unary", unary.GetLeaseId())
	acquire(t, cl, "ka:stream", streamed.GetLeaseId())
	stream := cl.KeepAliveStream(ctxT(t))
	for range 12 { // 6 s: six TTLs
		clk.Advance(500 * time.Millisecond)
		ka, err := cl.KeepAlive(ctxT(t), req(&pb.KeepAliveRequest{LeaseId: unary.GetLeaseId()}))
		mustOK(t, "KeepAlive", err)
		if ka.Msg.GetTtlMs() != 1000 || ka.Msg.GetLeaseId() != unary.GetLeaseId() {
			t.Fatalf("KeepAlive response %v", ka.Msg)
		}
		mustOK(t, "stream send", stream.Send(&pb.KeepAliveStreamRequest{LeaseId: streamed.GetLeaseId()}))
		r, err := stream.Receive()
		mustOK(t, "stream receive", err)
		if r.GetTtlMs() != 1000 || r.GetErrorCode() != "" || r.GetLeaseId() != streamed.GetLeaseId() {
			t.Fatalf("KeepAliveStream response %v", r)
		}
	}
	for _, name := range []string{"ka:unary", "ka:stream"} {
		info := status(t, cl, name)
		if info.GetHolder() == nil || info.GetRemainingMs() <= 0 {
			t.Fatalf("%s after 6 s of keepalives: %v", name, info)
		}
	}
	// Refusals on the stream are values, and the stream goes on.
	for _, tc := range []struct {
		lease string
		want  api.Code
	}{{servertest.UnknownLeaseID(), api.CodeLeaseExpired}, {"not-a-lease", api.CodeInvalidArgument}} {
		mustOK(t, "stream send", stream.Send(&pb.KeepAliveStreamRequest{LeaseId: tc.lease}))
		r, err := stream.Receive()
		mustOK(t, "stream receive", err)
		if r.GetErrorCode() != string(tc.want) || r.GetTtlMs() != 0 {
			t.Fatalf("KeepAliveStream(%q) = %v, want error code %s", tc.lease, r, tc.want)
		}
	}
	mustOK(t, "close send", stream.CloseRequest())
	mustOK(t, "close receive", stream.CloseResponse())

	// Stop: both expire, no earlier than TTL·(1+drift) after the last answer.
	drift := c.Config().Lessor.Drift
	minTTL := time.Second + time.Duration(float64(time.Second)*drift) - c.Config().Lessor.Tick
	moved := c.AdvanceUntil("both sessions to expire", func() bool {
		return status(t, cl, "ka:unary").GetHolder() == nil && status(t, cl, "ka:stream").GetHolder() == nil
	})
	if moved < minTTL {
		t.Fatalf("sessions expired %v after the last keepalive, want at least %v", moved, minTTL)
	}
	_, err := cl.KeepAlive(ctxT(t), req(&pb.KeepAliveRequest{LeaseId: unary.GetLeaseId()}))
	wantCode(t, "KeepAlive after expiry", err, api.CodeLeaseExpired)
}

// TestWatch: a watch sees acquired, queued, released and expired events
// for names with its prefix, in log order, with tokens.
func TestWatch(t *testing.T) {
	t.Parallel()
	c, _ := startManual(t, servertest.Options{})
	cl := c.Client
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	watchW, err := cl.Watch(ctx, req(&pb.WatchRequest{Prefix: "w:"}))
	mustOK(t, "Watch w:", err)
	defer watchW.Close()
	watchX, err := cl.Watch(ctx, req(&pb.WatchRequest{Prefix: "x:"}))
	mustOK(t, "Watch x:", err)
	defer watchX.Close()
	watchW.ResponseHeader() // blocks until the server registered the watch
	watchX.ResponseHeader()

	a := newSession(t, cl, 3_600_000, "A")
	b := newSession(t, cl, 1000, "B")
	hA := acquire(t, cl, "w:1", a.GetLeaseId())
	acquire(t, cl, "x:other", a.GetLeaseId())
	ch := acquireAsync(ctxT(t), cl, &pb.AcquireRequest{Name: "w:1", LeaseId: b.GetLeaseId()})
	waitQueued(t, cl, "w:1", b.GetLeaseId())
	_, err = cl.Release(ctxT(t), req(&pb.ReleaseRequest{Name: "w:1", LeaseId: a.GetLeaseId(), Token: hA.GetToken()}))
	mustOK(t, "Release", err)
	hB := recv(t, "B's Acquire", ch)
	mustOK(t, "B's Acquire", hB.err)
	tB := hB.resp.GetHolding().GetToken()
	c.AdvanceUntil("B to expire", func() bool { return status(t, cl, "w:1").GetHolder() == nil })

	type ev struct {
		typ   pb.EventType
		lease string
		owner string
		token uint64
	}
	want := []ev{
		{pb.EventType_EVENT_TYPE_ACQUIRED, a.GetLeaseId(), "A", hA.GetToken()},
		{pb.EventType_EVENT_TYPE_QUEUED, b.GetLeaseId(), "B", 0},
		{pb.EventType_EVENT_TYPE_RELEASED, a.GetLeaseId(), "A", hA.GetToken()},
		{pb.EventType_EVENT_TYPE_ACQUIRED, b.GetLeaseId(), "B", tB},
		{pb.EventType_EVENT_TYPE_EXPIRED, b.GetLeaseId(), "B", tB},
	}
	var lastIndex uint64
	for i, w := range want {
		if !watchW.Receive() {
			t.Fatalf("watch w: ended after %d events: %v", i, watchW.Err())
		}
		e := watchW.Msg().GetEvent()
		got := ev{e.GetType(), e.GetLeaseId(), e.GetOwner(), e.GetToken()}
		if got != w || e.GetName() != "w:1" {
			t.Fatalf("event %d: %v %+v, want %+v on w:1", i, e.GetName(), got, w)
		}
		// The release and the grant to the head of the queue are one entry.
		sameEntry := i == 3
		if sameEntry && e.GetIndex() != lastIndex || !sameEntry && e.GetIndex() <= lastIndex {
			t.Fatalf("event %d at index %d after index %d", i, e.GetIndex(), lastIndex)
		}
		lastIndex = e.GetIndex()
	}
	// The x: watch saw only x:other; a final event proves nothing else came.
	acquire(t, cl, "x:last", a.GetLeaseId())
	for _, name := range []string{"x:other", "x:last"} {
		if !watchX.Receive() {
			t.Fatalf("watch x: ended: %v", watchX.Err())
		}
		if e := watchX.Msg().GetEvent(); e.GetName() != name || e.GetType() != pb.EventType_EVENT_TYPE_ACQUIRED {
			t.Fatalf("watch x: got %v, want ACQUIRED %s", e, name)
		}
	}
	cancel()
}
