package client_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
)

type started struct {
	epoch uint64
	at    time.Time
}

// candidate records what RunElection did for one candidate.
type candidate struct {
	started chan started      // OnStartedLeading
	ended   chan time.Time    // when the ctx of OnStartedLeading ended
	cause   chan error        // its cause
	stopped chan struct{}     // OnStoppedLeading
	mu      sync.Mutex        // protects leaders
	leaders map[uint64]string // OnNewLeader: epoch → value
	result  chan error        // RunElection's return
}

func runCandidate(ctx context.Context, cl *client.Client, s *client.Session, name, value string) *candidate {
	c := &candidate{started: make(chan started, 4), ended: make(chan time.Time, 4), cause: make(chan error, 4),
		stopped: make(chan struct{}, 4), leaders: map[uint64]string{}, result: make(chan error, 1)}
	var epoch uint64
	go func() {
		c.result <- client.RunElection(ctx, s, name, []byte(value), client.Callbacks{
			OnStartedLeading: func(lctx context.Context) {
				if v, e, err := cl.Leader(lctx, name); err == nil && string(v) == value {
					epoch = e
				}
				c.started <- started{epoch, time.Now()}
				<-lctx.Done()
				c.ended <- time.Now()
				c.cause <- context.Cause(lctx)
			},
			OnStoppedLeading: func() { c.stopped <- struct{}{} },
			OnNewLeader: func(v []byte, e uint64) {
				c.mu.Lock()
				c.leaders[e] = string(v)
				c.mu.Unlock()
			},
		})
	}()
	return c
}

func (c *candidate) saw(epoch uint64, value string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leaders[epoch] == value
}

// TestRunElectionResign: the first candidate leads; when its ctx ends it
// resigns, its leading ctx ends and OnStoppedLeading runs, and then the
// second candidate leads with a larger epoch. Both observe both leaders.
func TestRunElectionResign(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.Addr)
	ctx := testCtx(t)
	ctxA, stopA := context.WithCancel(ctx)
	defer stopA()
	ctxB, stopB := context.WithCancel(ctx)
	defer stopB()
	a := runCandidate(ctxA, c, newSession(t, c, client.WithOwner("a")), "svc", "a:1")
	epochA := recv(t, a.started, 10*time.Second, "a elected").epoch
	b := runCandidate(ctxB, c, newSession(t, c, client.WithOwner("b")), "svc", "b:1")
	eventually(t, 10*time.Second, "b queued", func() bool {
		info, err := c.Status(ctx, "svc")
		return err == nil && len(info.GetWaiters()) == 1
	})
	select {
	case <-b.started:
		t.Fatal("b elected while a leads")
	default:
	}
	stopA()
	endedA := recv(t, a.ended, 10*time.Second, "a's leading ctx ended")
	if cause := recv(t, a.cause, time.Second, "cause"); !errors.Is(cause, client.ErrReleased) {
		t.Fatalf("a's leading ctx ended with %v, want ErrReleased", cause)
	}
	recv(t, a.stopped, 10*time.Second, "a stopped leading")
	if err := recv(t, a.result, 10*time.Second, "a's RunElection"); err != nil {
		t.Fatalf("RunElection of a: %v", err)
	}
	startB := recv(t, b.started, 10*time.Second, "b elected")
	epochB := startB.epoch
	if !endedA.Before(startB.at) {
		t.Fatalf("a stopped leading at %v, after b started at %v", endedA, startB.at)
	}
	if epochB <= epochA || epochA == 0 {
		t.Fatalf("epochs a %d, b %d: b's must be larger", epochA, epochB)
	}
	eventually(t, 10*time.Second, "b observes both leaders", func() bool { return b.saw(epochA, "a:1") && b.saw(epochB, "b:1") })
}

// TestRunElectionLeaseLost: a candidate whose session stops renewing loses
// its leading ctx (cause ErrLeaseLost) before the other candidate is
// elected, and its RunElection returns the session's error.
func TestRunElectionLeaseLost(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.Addr)
	ctx := testCtx(t)
	sa := newSession(t, c, client.WithOwner("a"), client.WithTTL(time.Second))
	a := runCandidate(ctx, c, sa, "svc", "a")
	recv(t, a.started, 10*time.Second, "a elected")
	b := runCandidate(ctx, c, newSession(t, c, client.WithOwner("b")), "svc", "b")
	eventually(t, 10*time.Second, "b queued", func() bool {
		info, err := c.Status(ctx, "svc")
		return err == nil && len(info.GetWaiters()) == 1
	})
	sa.Orphan() // stops renewing, as a paused or partitioned process would
	endedA := recv(t, a.ended, 10*time.Second, "a's leading ctx ended")
	if cause := recv(t, a.cause, time.Second, "cause"); !errors.Is(cause, client.ErrLeaseLost) {
		t.Fatalf("a's leading ctx ended with %v, want ErrLeaseLost", cause)
	}
	electedB := recv(t, b.started, 15*time.Second, "b elected after a's lease expired").at
	if !endedA.Before(electedB) {
		t.Fatalf("a stopped leading at %v, after b was elected at %v", endedA, electedB)
	}
	if err := recv(t, a.result, 10*time.Second, "a's RunElection"); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("RunElection of a returned %v, want ErrLeaseLost", err)
	}
}

// TestObserve yields the current leader, then every new value and leader.
func TestObserve(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.Addr)
	ctx := testCtx(t)
	la, err := newSession(t, c).Campaign(ctx, "obs", []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	seq, err := c.Observe(octx, "obs")
	if err != nil {
		t.Fatal(err)
	}
	type pair struct {
		v     string
		epoch uint64
	}
	got := make(chan pair, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for v, e := range seq {
			got <- pair{string(v), e}
		}
	}()
	if p := recv(t, got, 10*time.Second, "current leader"); p != (pair{"v1", la.Epoch()}) {
		t.Fatalf("first observed %v", p)
	}
	if err := la.Proclaim(ctx, []byte("v2")); err != nil {
		t.Fatal(err)
	}
	if p := recv(t, got, 10*time.Second, "proclaimed value"); p != (pair{"v2", la.Epoch()}) {
		t.Fatalf("after proclaim observed %v", p)
	}
	if err := la.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err := newSession(t, c).Campaign(ctx, "obs", []byte("w"))
	if err != nil {
		t.Fatal(err)
	}
	if p := recv(t, got, 10*time.Second, "next leader"); p != (pair{"w", lb.Epoch()}) {
		t.Fatalf("after a new election observed %v", p)
	}
	cancel()
	recv(t, done, 10*time.Second, "Observe to end with its ctx")
	if err := la.Proclaim(ctx, []byte("late")); !errors.Is(err, client.ErrNotHolder) {
		t.Fatalf("proclaim after resign: %v, want ErrNotHolder", err)
	}
}
