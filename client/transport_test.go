package client_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// proxy forwards TCP; while drop is set it swallows the server's bytes and
// closes the client side 200ms after the client sent something.
func proxy(t *testing.T, target string, drop *atomic.Bool) string {
	return forward(t, target, func(wg *sync.WaitGroup, _ <-chan struct{}, cc, sc net.Conn) {
		wg.Go(func() { // server -> client
			buf := make([]byte, 32<<10)
			for {
				n, err := sc.Read(buf)
				if n > 0 && !drop.Load() {
					cc.Write(buf[:n])
				}
				if err != nil {
					cc.Close()
					return
				}
			}
		})
		wg.Go(func() { // client -> server
			buf := make([]byte, 32<<10)
			for {
				n, err := cc.Read(buf)
				if n > 0 {
					sc.Write(buf[:n])
					if drop.Load() {
						go func() {
							time.Sleep(200 * time.Millisecond)
							drop.Store(false)
							cc.Close()
							sc.Close()
						}()
					}
				}
				if err != nil {
					sc.Close()
					return
				}
			}
		})
	})
}

// A release whose reply is lost on the way back (the connection breaks
// after the request was sent) was applied: the client asks again and, the
// holding being gone, reports it released — never not-holder.
func TestReleaseReplyLostIsConfirmed(t *testing.T) {
	srv := servertest.Start(t, servertest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	direct, err := client.Dial(ctx, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	s, err := direct.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	l, err := s.Acquire(ctx, "lost-reply")
	if err != nil {
		t.Fatal(err)
	}
	var drop atomic.Bool
	c, err := client.Dial(ctx, proxy(t, srv.Addr, &drop))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	drop.Store(true)
	err = c.Release(ctx, "lost-reply", l.LeaseID(), l.Token())
	if err != nil {
		t.Fatalf("release with its reply lost: %v (code %s), want it confirmed by a second release", err, api.CodeOf(err))
	}
	info, err := direct.Status(ctx, "lost-reply")
	if err != nil || info.GetHolder() != nil {
		t.Fatalf("the release was applied, so the lock is free: %v, %v", info, err)
	}
}

// TestCallsLeaveAStalledEndpoint: when the connection to an endpoint
// stalls (open, nothing comes back), the client's HTTP/2 health check
// closes it, and a lock operation waiting on it, with no deadline of its
// own, goes to the next endpoint instead of waiting forever.
func TestCallsLeaveAStalledEndpoint(t *testing.T) {
	ts := startServer(t)
	stalled := newProxy(t, ts.Addr)
	c := dial(t, stalled.Addr()+","+ts.Addr, client.WithConnectionCheck(200*time.Millisecond, 300*time.Millisecond))
	s := newSession(t, c, client.WithTTL(10*time.Second))
	l, err := s.Acquire(testCtx(t), "stall:a")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	stalled.Stall()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := s.Acquire(context.Background(), "stall:b")
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("acquire after the endpoint stalled: %v", err)
		}
		t.Logf("acquired %v after the endpoint stalled", time.Since(start).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		stalled.Close() // ends the call
		t.Fatal("an acquire without a deadline still waits on a stalled endpoint after 10 s")
	}
}
