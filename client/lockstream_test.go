package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/harness/cutreply"
	"github.com/leasehold/leasehold/internal/harness/simtest"
)

// streamCutter serves the real API; while armed, a LockStream whose
// answer matches cut loses that answer and breaks (reset) right after the
// server wrote it: the request ran to completion on the server and the
// client never learns its outcome.
type streamCutter struct {
	h     http.Handler
	kind  atomic.Int32 // the answers to cut: cutGrants, or cutReleases (and refusals)
	armed atomic.Int32 // streams still to break
	cuts  atomic.Int32 // answers lost
}

const (
	cutGrants = iota
	cutReleases
)

// take reports whether m is to be cut, counting it.
func (c *streamCutter) take(m *pb.LockStreamResponse) bool {
	switch c.kind.Load() {
	case cutGrants:
		if m.GetAcquire() == nil && m.GetTryAcquire() == nil {
			return false
		}
	case cutReleases:
		if m.GetRelease() == nil && m.GetError() == nil { // a second Release is refused
			return false
		}
	}
	for {
		n := c.armed.Load()
		if n <= 0 {
			return false
		}
		if c.armed.CompareAndSwap(n, n-1) {
			c.cuts.Add(1)
			return true
		}
	}
}

func (c *streamCutter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/LockStream") {
		c.h.ServeHTTP(w, r)
		return
	}
	cutreply.ServeStream(c.h, w, r, func(payload []byte) bool {
		var m pb.LockStreamResponse
		return proto.Unmarshal(payload, &m) == nil && c.take(&m)
	})
}

// A lock stream that breaks after the server granted, before the client
// learned it: the attempt's outcome is unknown, so the Acquire is retried
// with the same wait id (and gets the same holding), and when it gives up
// instead it withdraws the wait id, which releases the grant nobody
// learned. A Release whose answer is lost is outcome-unknown and is
// confirmed by a second Release.
func TestLockStreamCut(t *testing.T) {
	ts := startServer(t)
	ctx := testCtx(t)
	direct := dial(t, ts.Addr, client.WithUnaryLocks())
	sc := &streamCutter{h: ts.Server().Handler()}
	c := dial(t, serveHandler(t, sc), client.WithRetryTimeout(time.Second))
	s := newSession(t, c)

	// One grant lost: the retry gets the same holding.
	sc.armed.Store(1)
	l, err := s.TryAcquire(ctx, "sc:1")
	if err != nil {
		t.Fatalf("TryAcquire with its first answer lost = %v (code %s), want the retry's holding", err, api.CodeOf(err))
	}
	if sc.cuts.Load() != 1 {
		t.Fatalf("%d answers were cut, want 1", sc.cuts.Load())
	}
	info, err := direct.Status(ctx, "sc:1")
	if err != nil || info.GetHolder().GetToken() != l.Token() || info.GetHolder().GetLeaseId() != s.ID() {
		t.Fatalf("status after the retried TryAcquire: %v, %v; want held by the session with token %d", info, err, l.Token())
	}

	// Every grant lost until the caller gives up: the wait is withdrawn
	// and the grant the server made is released.
	sc.cuts.Store(0)
	sc.armed.Store(1 << 20)
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = s.Acquire(actx, "sc:2")
	cancel()
	sc.armed.Store(0)
	if err == nil {
		t.Fatal("Acquire with every answer lost succeeded")
	}
	if errors.Is(err, client.ErrOutcomeUnknown) && strings.Contains(err.Error(), "withdrawing failed") {
		t.Fatalf("the withdrawal failed: %v", err)
	}
	if sc.cuts.Load() == 0 {
		t.Fatal("no grant was made and lost: the test did not test")
	}
	info, err = direct.Status(ctx, "sc:2")
	if err != nil || info.GetHolder() != nil || len(info.GetWaiters()) != 0 {
		t.Fatalf("after the Acquire gave up: %v, %v; want no holder and no waiter (the lost grant withdrawn)", info, err)
	}

	// A Release whose answer is lost is asked again and confirmed.
	sc.kind.Store(cutReleases)
	sc.cuts.Store(0)
	sc.armed.Store(1)
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with its first answer lost = %v (code %s), want it confirmed by a second release", err, api.CodeOf(err))
	}
	if info, err := direct.Status(ctx, "sc:1"); err != nil || info.GetHolder() != nil {
		t.Fatalf("the Release did apply: %v, %v", info, err)
	}
	// With both answers lost it stays outcome-unknown.
	l2, err := s.TryAcquire(ctx, "sc:1")
	if err != nil {
		t.Fatal(err)
	}
	sc.armed.Store(2)
	if err := c.Release(ctx, "sc:1", l2.LeaseID(), l2.Token()); !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("Release with both answers lost = %v (code %s), want outcome-unknown", err, api.CodeOf(err))
	}
	if sc.cuts.Load() != 3 {
		t.Fatalf("%d answers were cut, want 3", sc.cuts.Load())
	}
}

// Many requests in flight on one lock stream when it breaks: each is
// answered (none hangs) as after a lost reply, and, being Acquires, they
// are retried on a new stream and granted in turn.
func TestLockStreamBreakWithManyInFlight(t *testing.T) {
	ts := startServer(t)
	ctx := testCtx(t)
	direct := dial(t, ts.Addr, client.WithUnaryLocks())
	holder := newSession(t, direct)
	held, err := holder.Acquire(ctx, "many")
	if err != nil {
		t.Fatal(err)
	}
	// The stream breaks at the first answer of a Release.
	sc := &streamCutter{h: ts.Server().Handler()}
	sc.kind.Store(cutReleases)
	c := dial(t, serveHandler(t, sc))
	const n = 8
	errs := make(chan error, n)
	tokens := make(chan uint64, n)
	for range n {
		s := newSession(t, c)
		go func() {
			l, err := s.Acquire(ctx, "many")
			if err != nil {
				errs <- err
				return
			}
			tokens <- l.Token()
			errs <- l.Release(ctx)
		}()
	}
	eventually(t, 10*time.Second, "every Acquire queued", func() bool {
		info, err := direct.Status(ctx, "many")
		return err == nil && len(info.GetWaiters()) == n
	})
	sc.armed.Store(1)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	for range n {
		if err := recv(t, errs, 20*time.Second, "an Acquire and Release"); err != nil {
			t.Fatalf("Acquire/Release across a broken stream: %v (code %s)", err, api.CodeOf(err))
		}
		tok := <-tokens
		if seen[tok] || tok <= held.Token() {
			t.Fatalf("token %d twice or not above the first holder's %d", tok, held.Token())
		}
		seen[tok] = true
	}
	if sc.cuts.Load() != 1 {
		t.Fatalf("%d streams were broken, want 1", sc.cuts.Load())
	}
	if info, err := direct.Status(ctx, "many"); err != nil || info.GetHolder() != nil || len(info.GetWaiters()) != 0 {
		t.Fatalf("after every worker released: %v, %v", info, err)
	}
}

// An Acquire whose caller cancels, or whose deadline passes, while it waits
// on the lock stream ends with canceled / deadline-exceeded, and its wait
// is gone from the server's queue.
func TestLockStreamCancelWithdraws(t *testing.T) {
	ts := startServer(t)
	ctx := testCtx(t)
	c := dial(t, ts.Addr)
	holder := newSession(t, c)
	if _, err := holder.Acquire(ctx, "cw"); err != nil {
		t.Fatal(err)
	}
	s := newSession(t, c)
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := s.Acquire(cctx, "cw")
		errc <- err
	}()
	eventually(t, 10*time.Second, "the Acquire queued", func() bool {
		info, err := c.Status(ctx, "cw")
		return err == nil && len(info.GetWaiters()) == 1
	})
	cancel()
	if err := recv(t, errc, 10*time.Second, "the cancelled Acquire"); !errors.Is(err, client.ErrCanceled) {
		t.Fatalf("cancelled Acquire = %v (code %s), want canceled", err, api.CodeOf(err))
	}
	eventually(t, 10*time.Second, "the wait withdrawn", func() bool {
		info, err := c.Status(ctx, "cw")
		return err == nil && len(info.GetWaiters()) == 0
	})

	dctx, dcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer dcancel()
	if _, err := s.Acquire(dctx, "cw"); !errors.Is(err, client.ErrDeadlineExceeded) {
		t.Fatalf("Acquire past its deadline = %v (code %s), want deadline-exceeded", err, api.CodeOf(err))
	}
	eventually(t, 10*time.Second, "the wait withdrawn", func() bool {
		info, err := c.Status(ctx, "cw")
		return err == nil && len(info.GetWaiters()) == 0
	})
}

// The lock stream fails over: an endpoint where nothing listens is
// skipped, and a follower forwards each message to the leader.
func TestLockStreamFailoverAndForward(t *testing.T) {
	cl := simtest.Start(t, 3, simtest.Options{})
	ctx := testCtx(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	follower := cl.Followers()[0]
	c := dial(t, dead+","+follower.Addr)
	s := newSession(t, c)
	l, err := s.Acquire(ctx, "fw")
	if err != nil {
		t.Fatalf("Acquire through a dead endpoint and a follower: %v", err)
	}
	if _, err := s.TryAcquire(ctx, "fw2"); err != nil {
		t.Fatalf("TryAcquire through a follower: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release through a follower: %v", err)
	}
	if info, err := c.Status(ctx, "fw"); err != nil || info.GetHolder() != nil {
		t.Fatalf("after Release: %v, %v", info, err)
	}
}

// A server without LockStream: the client uses the unary RPCs.
func TestLockStreamUnimplementedUsesUnary(t *testing.T) {
	ts := startServer(t)
	ctx := testCtx(t)
	var streams atomic.Int32
	addr := serveHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == leaseholdv1connect.LeaseholdServiceLockStreamProcedure {
			streams.Add(1)
			http.NotFound(w, r) // as a server that predates it
			return
		}
		ts.Server().Handler().ServeHTTP(w, r)
	}))
	c := dial(t, addr)
	s := newSession(t, c)
	for i := range 3 {
		l, err := s.Acquire(ctx, "old")
		if err != nil {
			t.Fatalf("Acquire %d from a server without LockStream: %v", i, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release %d: %v", i, err)
		}
	}
	if n := streams.Load(); n != 1 {
		t.Fatalf("%d LockStreams were tried, want 1 (then unary)", n)
	}
}

// olderLockStream is the LockStream of a server that predates the session
// operations on it: it refuses every request as an operation it does not
// know, without the header that lists them.
type olderLockStream struct {
	leaseholdv1connect.UnimplementedLeaseholdServiceHandler
	received atomic.Int32
}

func (o *olderLockStream) LockStream(_ context.Context, st *connect.BidiStream[pb.LockStreamRequest, pb.LockStreamResponse]) error {
	for {
		m, err := st.Receive()
		if err != nil {
			return nil
		}
		o.received.Add(1)
		err = st.Send(&pb.LockStreamResponse{Id: m.GetId(), Error: &pb.ErrorDetail{Code: string(api.CodeInvalidArgument)},
			Message: "a lock stream request needs one of acquire, try_acquire, release, cancel_wait"})
		if err != nil {
			return nil
		}
	}
}

// The session operations travel on the lock stream: no unary
// CreateSession, KeepAlive or CloseSession reaches the server. Against a
// server whose stream does not take them, the client learns so from its
// first refusal (which changed nothing) and sends them as unary RPCs.
func TestLockStreamSessionOps(t *testing.T) {
	ts := startServer(t)
	ctx := testCtx(t)
	sessionRPCs := []string{
		leaseholdv1connect.LeaseholdServiceCreateSessionProcedure,
		leaseholdv1connect.LeaseholdServiceKeepAliveProcedure,
		leaseholdv1connect.LeaseholdServiceCloseSessionProcedure,
	}
	var unary atomic.Int32
	count := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if slices.Contains(sessionRPCs, r.URL.Path) {
				unary.Add(1)
			}
			next.ServeHTTP(w, r)
		})
	}
	use := func(c *client.Client, lock bool) {
		t.Helper()
		s := newSession(t, c, client.WithTTL(30*time.Second))
		var l *client.Lock
		if lock {
			var err error
			if l, err = s.TryAcquire(ctx, "sops:"+s.ID()); err != nil {
				t.Fatalf("TryAcquire: %v", err)
			}
		}
		if ttl, err := c.RenewSession(ctx, s.ID()); err != nil || ttl != 30*time.Second {
			t.Fatalf("RenewSession: %v, %v", ttl, err)
		}
		if err := s.Close(ctx); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if l != nil {
			if info, err := c.Status(ctx, l.Name()); err != nil || info.GetHolder() != nil {
				t.Fatalf("after Close: %v, %v", info, err)
			}
		}
		if _, err := c.RenewSession(ctx, s.ID()); !errors.Is(err, client.ErrLeaseExpired) {
			t.Fatalf("RenewSession of the closed session: %v, want lease-expired", err)
		}
	}

	use(dial(t, serveHandler(t, count(ts.Server().Handler()))), true)
	if n := unary.Load(); n != 0 {
		t.Fatalf("%d unary session RPCs reached a server whose lock stream takes them, want 0", n)
	}

	older := &olderLockStream{}
	_, oldStream := leaseholdv1connect.NewLeaseholdServiceHandler(older)
	mux := http.NewServeMux()
	mux.Handle(leaseholdv1connect.LeaseholdServiceLockStreamProcedure, oldStream)
	mux.Handle("/", ts.Server().Handler())
	c := dial(t, serveHandler(t, count(mux)))
	for range 2 {
		use(c, false) // the older stream refuses lock operations too
	}
	if n := older.received.Load(); n != 1 {
		t.Fatalf("the older server's lock stream received %d session operations, want 1 (then unary)", n)
	}
	if n := unary.Load(); n != 8 {
		t.Fatalf("%d unary session RPCs reached the older server, want 8 (create, renew, close, renew; two sessions)", n)
	}
}
