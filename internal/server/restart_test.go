package server_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
	"github.com/leasehold/leasehold/internal/harness/servertest"
	"github.com/leasehold/leasehold/internal/server"
)

// TestRestart: Close and Open on the same data dir keep every session,
// holding, queue entry, lock-delay, KV entry and the token counter. The
// restarted leader treats every session as renewed at its election (plus
// Grace), so a session whose deadline passed while the server was down is
// not expired at once, and expires later if nobody renews it.
func TestRestart(t *testing.T) {
	t.Parallel()
	c, clk := startManual(t, servertest.Options{})
	cl := c.Client
	cfg := c.Config().Lessor

	a := newSession(t, cl, 5000, "A")
	b := newSession(t, cl, 3_600_000, "B")
	d := newSession(t, cl, 1000, "D")
	hA := acquire(t, cl, "r:1", a.GetLeaseId())
	_, err := cl.Acquire(ctxT(t), req(&pb.AcquireRequest{Name: "r:2", LeaseId: d.GetLeaseId(), LockDelayMs: 60_000}))
	mustOK(t, "Acquire r:2", err)
	_, err = cl.KvPut(ctxT(t), req(&pb.KvPutRequest{Key: "r:k", Value: []byte("v1"), Token: hA.GetToken()}))
	mustOK(t, "KvPut", err)
	// Queue B behind A. Through the node, not a blocking RPC, so no call is
	// left waiting across the restart.
	res, err := c.Server().Node().Apply(ctxT(t), &fsmpb.Command{Op: &fsmpb.Command_Acquire{Acquire: &fsmpb.Acquire{Name: "r:1", LeaseId: b.GetLeaseId(), WaitId: 7}}})
	if err != nil || !res.Queued {
		t.Fatalf("queue B: %v %v", res, err)
	}
	// D expires: r:2 enters its 60 s lock-delay.
	c.AdvanceUntil("D to expire", func() bool { return status(t, cl, "r:2").GetDelayed() })
	down := clk.Now()
	before := c.State()

	// Down for 10 s: longer than A's TTL.
	c.Stop()
	clk.Advance(10 * time.Second)
	c.Restart()
	promoted := clk.Now()
	// The restart raises the token counter (the header of the state); the
	// rest is unchanged.
	if !bytes.Equal(withoutHeader(t, before), withoutHeader(t, c.State())) {
		t.Fatal("the restarted server's state differs from the state before the restart")
	}
	info := status(t, cl, "r:1")
	if h := info.GetHolder(); h.GetLeaseId() != a.GetLeaseId() || h.GetToken() != hA.GetToken() || h.GetOwner() != "A" {
		t.Fatalf("r:1 holder after restart %v", h)
	}
	if want := (cfg.Grace + 5*time.Second + time.Duration(float64(5*time.Second)*cfg.Drift)).Milliseconds(); info.GetRemainingMs() != want {
		t.Fatalf("A's remaining TTL right after the restart is %d ms, want Grace + TTL·(1+drift) = %d ms", info.GetRemainingMs(), want)
	}
	if w := waiters(info); len(w) != 1 || w[0] != b.GetLeaseId() {
		t.Fatalf("r:1 waiters after restart %v", w)
	}
	if !status(t, cl, "r:2").GetDelayed() {
		t.Fatal("r:2 lost its lock-delay across the restart")
	}
	kv, err := cl.KvGet(ctxT(t), req(&pb.KvGetRequest{Key: "r:k"}))
	mustOK(t, "KvGet", err)
	if string(kv.Msg.GetValue()) != "v1" || kv.Msg.GetToken() != hA.GetToken() {
		t.Fatalf("KV after restart %v", kv.Msg)
	}
	if down.Add(10*time.Second) != promoted {
		t.Fatalf("clock moved while restarting")
	}

	// A's old deadline (5.1 s after its answer) is long past, yet the new
	// leader counts from its election: A holds until promoted + Grace +
	// 5 s·(1+drift). Step through that window tick by tick.
	deadline := promoted.Add(cfg.Grace + 5*time.Second + time.Duration(float64(5*time.Second)*cfg.Drift))
	for clk.Now().Before(deadline) {
		if h := status(t, cl, "r:1").GetHolder(); h.GetLeaseId() != a.GetLeaseId() {
			t.Fatalf("%v after the restart (deadline %v) A no longer holds r:1: %v",
				clk.Now().Sub(promoted), deadline.Sub(promoted), h)
		}
		clk.Advance(min(cfg.Tick, deadline.Sub(clk.Now())))
	}
	if h := status(t, cl, "r:1").GetHolder(); h.GetLeaseId() != a.GetLeaseId() {
		t.Fatalf("A lost r:1 at its deadline %v", deadline.Sub(promoted))
	}
	_, err = cl.KeepAlive(ctxT(t), req(&pb.KeepAliveRequest{LeaseId: b.GetLeaseId()}))
	mustOK(t, "KeepAlive B", err)

	// Not renewed: A expires, and the queue hands r:1 to B with a token
	// above every token issued before the restart.
	c.AdvanceUntil("A to expire", func() bool { return status(t, cl, "r:1").GetHolder().GetLeaseId() == b.GetLeaseId() })
	hB := status(t, cl, "r:1").GetHolder()
	if hB.GetToken() <= hA.GetToken()+1 { // D's grant took hA+1
		t.Fatalf("B was granted token %d after the restart; tokens before reached %d", hB.GetToken(), hA.GetToken()+1)
	}
	e := newSession(t, cl, 5000, "E")
	if h := acquire(t, cl, "r:3", e.GetLeaseId()); h.GetToken() <= hB.GetToken() {
		t.Fatalf("next grant token %d, not above %d", h.GetToken(), hB.GetToken())
	}
}

// withoutHeader drops the header record (token counter and grant clock)
// of a snapshot stream.
func withoutHeader(t *testing.T, snap []byte) []byte {
	t.Helper()
	body, err := fsm.SnapshotBody(snap)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// TestGraceDefault: a zero Lessor.Grace means twice the raft leader-lease
// timeout, as server.Config documents: the new leader's grace is never
// silently zero.
func TestGraceDefault(t *testing.T) {
	t.Parallel()
	c, _ := startManual(t, servertest.Options{Configure: func(cfg *server.Config) { cfg.Lessor.Grace = 0 }})
	a := newSession(t, c.Client, 5000, "A")
	acquire(t, c.Client, "g", a.GetLeaseId())
	c.Restart()
	lease := 2 * c.Config().Raft.LeaderLeaseTimeout
	want := (lease + 5*time.Second + time.Duration(float64(5*time.Second)*c.Config().Lessor.Drift)).Milliseconds()
	if got := status(t, c.Client, "g").GetRemainingMs(); got != want {
		t.Fatalf("remaining TTL after a restart with Grace 0: %d ms, want 2 × leader lease = %v + TTL·(1+drift) = %d ms", got, lease, want)
	}
}

// TestShutdownEndsWaits: stopping the server ends a queued Acquire and a
// Watch at once with unavailable (the queue entry is withdrawn first),
// rather than holding the graceful shutdown open until its timeout.
func TestShutdownEndsWaits(t *testing.T) {
	t.Parallel()
	c, _ := startManual(t, servertest.Options{})
	ctx := ctxT(t)
	watch, err := c.Client.Watch(ctx, req(&pb.WatchRequest{}))
	mustOK(t, "Watch", err)
	defer watch.Close()
	watch.ResponseHeader()
	a := newSession(t, c.Client, 60_000, "A")
	acquire(t, c.Client, "s", a.GetLeaseId())
	b := newSession(t, c.Client, 60_000, "B")
	ch := acquireAsync(ctx, c.Client, &pb.AcquireRequest{Name: "s", LeaseId: b.GetLeaseId()})
	waitQueued(t, c.Client, "s", b.GetLeaseId())

	start := time.Now()
	c.Stop()
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("Stop took %v with a Watch and a queued Acquire open", took)
	}
	wantCode(t, "queued Acquire at shutdown", recv(t, "Acquire", ch).err, api.CodeUnavailable)
	for watch.Receive() {
	}
	wantCode(t, "Watch at shutdown", watch.Err(), api.CodeUnavailable)

	c.Restart()
	info := status(t, c.Client, "s")
	if w := waiters(info); len(w) != 0 || info.GetHolder().GetLeaseId() != a.GetLeaseId() {
		t.Fatalf("after the restart: holder %v, waiters %v; want A holding and no waiter", info.GetHolder(), w)
	}
}
