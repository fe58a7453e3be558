package server

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/leasehold/leasehold/api"
	lh "github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/fsm"
)

// An Acquire that was granted while the leader's lessor holds the session
// as ended — it proposed the session's expiry, which has not applied (as a
// leader resumed from a pause does; here the lessor forgets the session
// while its Acquire waits in the queue) — is answered outcome-unknown and its
// grant withdrawn, never lease-expired: the session may well live on, and
// its holder must not be told it is gone while it holds a token it does
// not know.
func TestAcquireGrantedWhileTheLessorEndsTheSession(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig(t.TempDir(), ln.Addr().String())
	cfg.Logger = slog.New(slog.DiscardHandler)
	srv, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	served := make(chan error, 1)
	sctx, stop := context.WithCancel(context.Background())
	go func() { served <- srv.Serve(sctx, ln) }()
	defer func() {
		stop()
		<-served
		_ = srv.Close()
	}()
	if err := srv.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := lh.Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h, err := c.NewSession(ctx, lh.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	held, err := h.Acquire(ctx, "expiring")
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.NewSession(ctx, lh.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan error, 1)
	go func() {
		_, err := srv.acquire(ctx, acquireReq{name: "expiring", leaseID: w.ID()})
		answered <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := c.Status(ctx, "expiring")
		if err == nil && len(info.GetWaiters()) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiter never queued: %v %v", info, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The lessor holds the waiter's session as ended; the applied state
	// still has it. The release grants the name to the waiter from the queue.
	srv.lessor.Observe(&fsm.Result{EndedSessions: []string{w.ID()}})
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-answered
	if api.CodeOf(err) != api.CodeOutcomeUnknown {
		t.Fatalf("a grant while the lessor ended the session: %v (code %s), want outcome-unknown", err, api.CodeOf(err))
	}
	info, err := c.Status(ctx, "expiring")
	if err != nil {
		t.Fatal(err)
	}
	if info.GetHolder() != nil {
		t.Fatalf("the grant nobody learned is kept: holder %v", info.GetHolder())
	}
}
