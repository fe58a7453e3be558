package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/client"
)

// forward accepts connections on a 127.0.0.1 port, dials target for each
// and hands both ends to pipe, which starts its copying goroutines on wg.
// When the test ends it closes every connection and waits for them.
func forward(t *testing.T, target string, pipe func(wg *sync.WaitGroup, stop <-chan struct{}, cc, sc net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex // protects conns
		conns []net.Conn
		wg    sync.WaitGroup
	)
	stop := make(chan struct{})
	t.Cleanup(func() {
		close(stop)
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			cc, err := ln.Accept()
			if err != nil {
				return
			}
			sc, err := net.Dial("tcp", target)
			if err != nil {
				cc.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, cc, sc)
			mu.Unlock()
			pipe(&wg, stop, cc, sc)
		}
	})
	return ln.Addr().String()
}

// slowProxy forwards TCP to target and delivers every byte the server
// sends delay late: replies arrive after the caller may have given up.
func slowProxy(t *testing.T, target string, delay time.Duration) string {
	type chunk struct {
		b   []byte
		due time.Time
	}
	return forward(t, target, func(wg *sync.WaitGroup, stop <-chan struct{}, cc, sc net.Conn) {
		wg.Go(func() { // client -> server, at once
			buf := make([]byte, 32<<10)
			for {
				n, err := cc.Read(buf)
				if n > 0 {
					sc.Write(buf[:n])
				}
				if err != nil {
					sc.Close()
					return
				}
			}
		})
		late := make(chan chunk, 4096)
		wg.Go(func() { // server -> queue
			defer close(late)
			buf := make([]byte, 32<<10)
			for {
				n, err := sc.Read(buf)
				if n > 0 {
					late <- chunk{append([]byte(nil), buf[:n]...), time.Now().Add(delay)}
				}
				if err != nil {
					return
				}
			}
		})
		wg.Go(func() { // queue -> client, delay late
			defer cc.Close()
			for c := range late {
				t := time.NewTimer(time.Until(c.due))
				select {
				case <-stop:
					t.Stop()
					return
				case <-t.C: // simulated network latency, not a wait for a condition
				}
				if _, err := cc.Write(c.b); err != nil {
					return
				}
			}
		})
	})
}

// A grant whose reply reaches the caller after its deadline is not kept:
// the caller was told "no", so nobody knows the token, and the name must
// be free for others — even though the caller's session lives on.
func TestGrantAfterGiveUpIsNotKept(t *testing.T) {
	srv := startServer(t)
	direct := dial(t, srv.Addr)
	slow := dial(t, slowProxy(t, srv.Addr, 2*time.Second))
	ctx := testCtx(t)

	t.Run("queued", func(t *testing.T) {
		a := newSession(t, direct, client.WithOwner("A"))
		la, err := a.Acquire(ctx, "late-grant")
		if err != nil {
			t.Fatal(err)
		}
		b := newSession(t, slow, client.WithOwner("B"))
		bctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		res := make(chan error, 1)
		go func() {
			_, err := b.Acquire(bctx, "late-grant")
			res <- err
		}()
		eventually(t, 5*time.Second, "B queued", func() bool {
			info, err := direct.Status(ctx, "late-grant")
			return err == nil && len(info.GetWaiters()) == 1
		})
		// The grant to B is made while B still waits; its reply arrives
		// two seconds later, after B gave up.
		if err := la.Release(ctx); err != nil {
			t.Fatal(err)
		}
		err = recv(t, res, 15*time.Second, "B's Acquire")
		if !errors.Is(err, client.ErrDeadlineExceeded) {
			t.Fatalf("B's Acquire = %v (code %s), want deadline-exceeded", err, api.CodeOf(err))
		}
		if b.Err() != nil {
			t.Fatalf("B's session ended (%v); the test needs it alive", b.Err())
		}
		c := newSession(t, direct, client.WithOwner("C"))
		if _, err := c.TryAcquire(ctx, "late-grant"); err != nil {
			info, _ := direct.Status(ctx, "late-grant")
			t.Fatalf("C's TryAcquire after B gave up = %v; holder %v", err, info.GetHolder())
		}
	})

	t.Run("immediate", func(t *testing.T) {
		b := newSession(t, slow, client.WithOwner("B"))
		bctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, err := b.TryAcquire(bctx, "late-try")
		if !errors.Is(err, client.ErrDeadlineExceeded) {
			t.Fatalf("B's TryAcquire = %v (code %s), want deadline-exceeded", err, api.CodeOf(err))
		}
		c := newSession(t, direct, client.WithOwner("C"))
		if _, err := c.TryAcquire(ctx, "late-try"); err != nil {
			info, _ := direct.Status(ctx, "late-try")
			t.Fatalf("C's TryAcquire after B gave up = %v; holder %v", err, info.GetHolder())
		}
	})
}

// Every Lock for one holding sees its end: re-entrant acquires share Done,
// and Release closes Done before the release reaches the server, so the
// critical section stops before the name can pass to another session.
func TestLockViewsShareDone(t *testing.T) {
	ts := startServer(t)
	ctx := testCtx(t)
	var l1 *client.Lock
	var doneAtRelease atomic.Int32 // 1: Done was closed when the Release arrived; 2: open
	addr := serveHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/Release") && l1 != nil {
			if isClosed(l1.Done()) {
				doneAtRelease.Store(1)
			} else {
				doneAtRelease.Store(2)
			}
		}
		ts.Server().Handler().ServeHTTP(w, r)
	}))
	// Unary lock calls, so that the handler sees the Release as a request
	// of its own (Lock.Release ends Done before any transport is used).
	c := dial(t, addr, client.WithUnaryLocks())
	s := newSession(t, c)
	var err error
	if l1, err = s.Acquire(ctx, "views"); err != nil {
		t.Fatal(err)
	}
	l2, err := s.Acquire(ctx, "views")
	if err != nil {
		t.Fatal(err)
	}
	l3, err := s.TryAcquire(ctx, "views")
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() != l1.Token() || l3.Token() != l1.Token() {
		t.Fatalf("re-entrant acquires got tokens %d, %d, %d, want one holding", l1.Token(), l2.Token(), l3.Token())
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := doneAtRelease.Load(); got != 1 {
		t.Errorf("Done of the released Lock was open when the Release reached the server (%d)", got)
	}
	for i, l := range []*client.Lock{l1, l2, l3} {
		if !isClosed(l.Done()) || !errors.Is(context.Cause(l.Context()), client.ErrReleased) {
			t.Errorf("view %d after Release: Done closed %v, cause %v; want closed with ErrReleased", i+1, isClosed(l.Done()), context.Cause(l.Context()))
		}
	}
	// A new grant is a new holding with its own Done.
	l4, err := s.Acquire(ctx, "views")
	if err != nil {
		t.Fatal(err)
	}
	if l4.Token() <= l1.Token() || isClosed(l4.Done()) {
		t.Fatalf("acquire after release: token %d (old %d), Done closed %v", l4.Token(), l1.Token(), isClosed(l4.Done()))
	}
	l5, err := s.Acquire(ctx, "views")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !isClosed(l4.Done()) || !isClosed(l5.Done()) {
		t.Fatal("Done of a closed session's locks stayed open")
	}
}

// mixedModes answers every acquire with the shared holding of token 1
// carrying no value, as a server does that returns a session's existing
// holding whatever the request's mode; it counts withdrawals.
type mixedModes struct {
	leaseholdv1connect.UnimplementedLeaseholdServiceHandler
	withdrawals atomic.Int32
}

func (m *mixedModes) CreateSession(context.Context, *connect.Request[pb.CreateSessionRequest]) (*connect.Response[pb.CreateSessionResponse], error) {
	return connect.NewResponse(&pb.CreateSessionResponse{LeaseId: "l1", TtlMs: 60_000}), nil
}

func (m *mixedModes) Acquire(_ context.Context, r *connect.Request[pb.AcquireRequest]) (*connect.Response[pb.AcquireResponse], error) {
	h := &pb.Holding{Name: r.Msg.GetName(), LeaseId: r.Msg.GetLeaseId(), Token: 1, Mode: pb.LockMode_LOCK_MODE_SHARED}
	return connect.NewResponse(&pb.AcquireResponse{Holding: h, TtlMs: 60_000}), nil
}

func (m *mixedModes) CancelWait(context.Context, *connect.Request[pb.CancelWaitRequest]) (*connect.Response[pb.CancelWaitResponse], error) {
	m.withdrawals.Add(1)
	return connect.NewResponse(&pb.CancelWaitResponse{}), nil
}

// TestAcquireChecksTheModeItGot: the client never takes a grant in another
// mode or with another value than it asked for as its own, and withdraws
// nothing: the holding is one the session already had.
func TestAcquireChecksTheModeItGot(t *testing.T) {
	srv := &mixedModes{}
	_, h := leaseholdv1connect.NewLeaseholdServiceHandler(srv)
	c := dial(t, serveHandler(t, h), client.WithUnaryLocks())
	ctx := testCtx(t)
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Orphan()
	if l, err := s.Acquire(ctx, "rw", client.Shared()); err != nil || l.Token() != 1 {
		t.Fatalf("read lock = %v, %v", l, err)
	}
	for what, try := range map[string]func() error{
		"write lock": func() error { _, err := s.Acquire(ctx, "rw"); return err },
		"campaign":   func() error { _, err := s.Campaign(ctx, "rw", []byte("me")); return err },
		"AcquireIn":  func() error { _, err := c.AcquireIn(ctx, s.ID(), "rw", false); return err },
	} {
		err := try()
		if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "release it first") {
			t.Fatalf("%s answered with a shared holding: %v, want invalid-argument", what, err)
		}
	}
	if n := srv.withdrawals.Load(); n != 0 {
		t.Fatalf("%d withdrawals of a holding the session already had", n)
	}
}
