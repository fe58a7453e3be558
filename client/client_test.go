package client_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/client"
)

// Server timing the tests rely on: the lessor frees a lock no earlier than
// answered + TTL·(1+drift) and checks every tick; the client gives up at
// sent + TTL·(1−drift) − margin.
const (
	drift  = 0.02
	margin = 100 * time.Millisecond
)

func TestNewSessionTTL(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.Addr)
	for _, tc := range []struct {
		name     string
		ask, get time.Duration
	}{
		{"below the minimum is raised", 200 * time.Millisecond, time.Second},
		{"the minimum", time.Second, time.Second},
		{"in range as asked", 2500 * time.Millisecond, 2500 * time.Millisecond},
		{"the maximum", time.Hour, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSession(t, c, client.WithTTL(tc.ask), client.WithOwner("ttl-test"))
			if got := s.TTL(); got != tc.get {
				t.Errorf("TTL() = %s after asking %s, want %s", got, tc.ask, tc.get)
			}
			if s.Owner() != "ttl-test" || len(s.ID()) == 0 {
				t.Errorf("Owner() = %q, ID() = %q", s.Owner(), s.ID())
			}
		})
	}
	for _, ttl := range []time.Duration{0, -time.Second, 2 * time.Hour} { // above the maximum: refused, not lowered
		_, err := c.NewSession(testCtx(t), client.WithTTL(ttl))
		if !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("NewSession(ttl %s) = %v, want invalid-argument", ttl, err)
		}
	}
	if _, err := c.NewSession(testCtx(t), client.WithSafety(1, 0)); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("NewSession(drift 1) = %v, want invalid-argument", err)
	}
}

func TestKeepAliveHoldsPastTTL(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.Addr)
	ctx := testCtx(t)
	s := newSession(t, c, client.WithTTL(time.Second))
	l, err := s.Acquire(ctx, "keepalive")
	if err != nil {
		t.Fatal(err)
	}
	// Three TTLs: without keepalives the lock would be freed after one.
	end := time.Now().Add(3 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(end) {
		<-tick.C
		info, err := c.Status(ctx, "keepalive")
		if err != nil {
			t.Fatal(err)
		}
		if h := info.GetHolder(); h.GetLeaseId() != s.ID() || h.GetToken() != l.Token() {
			t.Fatalf("status holder = %v, want lease %s token %d", h, s.ID(), l.Token())
		}
		if isClosed(l.Done()) {
			t.Fatalf("Done closed while keepalives succeed: %v", context.Cause(l.Context()))
		}
	}
	if d := time.Until(s.Deadline()); d <= 0 || d > time.Second {
		t.Errorf("Deadline() is %s from now, want within (0, TTL]", d)
	}
}

func TestAcquireWaitsInFIFOQueue(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.Addr)
	ctx := testCtx(t)
	const name = "queue"
	s1, s2, s3 := newSession(t, c), newSession(t, c), newSession(t, c)
	l1, err := s1.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *client.Lock
		err error
	}
	queue := func(s *client.Session, waiters int) <-chan result {
		ch := make(chan result, 1)
		go func() {
			l, err := s.Acquire(ctx, name)
			ch <- result{l, err}
		}()
		eventually(t, 5*time.Second, "waiter queued", func() bool {
			info, err := c.Status(ctx, name)
			return err == nil && len(info.GetWaiters()) == waiters && info.GetWaiters()[waiters-1].GetLeaseId() == s.ID()
		})
		return ch
	}
	r2 := queue(s2, 1)
	r3 := queue(s3, 2)
	select {
	case r := <-r2:
		t.Fatalf("second Acquire returned while the lock was held: %v", r.err)
	default:
	}

	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got2 := recv(t, r2, 5*time.Second, "the first waiter's grant")
	if got2.err != nil {
		t.Fatal(got2.err)
	}
	if got2.l.Token() <= l1.Token() || got2.l.LeaseID() != s2.ID() {
		t.Errorf("first waiter got token %d lease %s, want token > %d and lease %s", got2.l.Token(), got2.l.LeaseID(), l1.Token(), s2.ID())
	}
	select {
	case r := <-r3:
		t.Fatalf("third Acquire returned while the second held the lock: %v", r.err)
	default:
	}
	if err := got2.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got3 := recv(t, r3, 5*time.Second, "the second waiter's grant")
	if got3.err != nil {
		t.Fatal(got3.err)
	}
	if got3.l.Token() <= got2.l.Token() {
		t.Errorf("second waiter got token %d, want > %d", got3.l.Token(), got2.l.Token())
	}
}

func TestAcquireContextEndsWithdrawsWaiter(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.Addr)
	ctx := testCtx(t)
	s1, s2 := newSession(t, c), newSession(t, c)
	if _, err := s1.Acquire(ctx, "busy"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err := s2.Acquire(wctx, "busy")
	if !errors.Is(err, client.ErrDeadlineExceeded) {
		t.Fatalf("Acquire with an ending context = %v, want deadline-exceeded", err)
	}
	eventually(t, 5*time.Second, "the waiter to leave the queue", func() bool {
		info, err := c.Status(ctx, "busy")
		return err == nil && len(info.GetWaiters()) == 0 && info.GetHolder().GetLeaseId() == s1.ID()
	})
}

func TestAcquireHeldNameReturnsSameHolding(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.Addr)
	ctx := testCtx(t)
	s := newSession(t, c)
	l1, err := s.Acquire(ctx, "again")
	if err != nil {
		t.Fatal(err)
	}
	l2, err := s.Acquire(ctx, "again")
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() != l1.Token() || l2.LeaseID() != l1.LeaseID() {
		t.Errorf("second Acquire = token %d lease %s, want the same holding (token %d lease %s)", l2.Token(), l2.LeaseID(), l1.Token(), l1.LeaseID())
	}
}

func TestTryAcquireLocked(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.Addr)
	ctx := testCtx(t)
	s1, s2 := newSession(t, c, client.WithOwner("a")), newSession(t, c, client.WithOwner("b"))
	l1, err := s1.TryAcquire(ctx, "try")
	if err != nil {
		t.Fatal(err)
	}
	if l1.Token() == 0 || l1.Name() != "try" || l1.Holding().GetOwner() != "a" {
		t.Errorf("holding = %v", l1.Holding())
	}
	_, err = s2.TryAcquire(ctx, "try")
	if !errors.Is(err, client.ErrLocked) {
		t.Fatalf("TryAcquire of a held name = %v, want ErrLocked", err)
	}
	if code := api.CodeOf(err); code != api.CodeLocked {
		t.Errorf("code = %s, want %s", code, api.CodeLocked)
	}
	info, err := c.Status(ctx, "try")
	if err != nil {
		t.Fatal(err)
	}
	if info.GetHolder().GetLeaseId() != s1.ID() || len(info.GetWaiters()) != 0 {
		t.Errorf("after a refused TryAcquire: holder %v waiters %v, want s1 and no waiter", info.GetHolder(), info.GetWaiters())
	}
}

func TestReleaseStaleHolding(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.Addr)
	ctx := testCtx(t)
	s1, s2 := newSession(t, c), newSession(t, c)
	l1, err := s1.Acquire(ctx, "stale")
	if err != nil {
		t.Fatal(err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !isClosed(l1.Done()) || !errors.Is(context.Cause(l1.Context()), client.ErrReleased) {
		t.Errorf("after Release: Done closed %v, cause %v, want closed with ErrReleased", isClosed(l1.Done()), context.Cause(l1.Context()))
	}
	if isClosed(s1.Done()) {
		t.Error("releasing a lock ended its session")
	}
	if err := l1.Release(ctx); !errors.Is(err, client.ErrNotHolder) {
		t.Errorf("second Release = %v, want ErrNotHolder", err)
	}
	l2, err := s2.Acquire(ctx, "stale")
	if err != nil {
		t.Fatal(err)
	}
	if err := l1.Release(ctx); !errors.Is(err, client.ErrNotHolder) {
		t.Errorf("stale Release while another holds = %v, want ErrNotHolder", err)
	}
	// A stale handle of the same session with the current lease id but an
	// old token is refused too.
	l3, err := s1.Acquire(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx, "other", s1.ID(), l3.Token()-1); !errors.Is(err, client.ErrNotHolder) {
		t.Errorf("Release with a wrong token = %v, want ErrNotHolder", err)
	}
	if err := c.Release(ctx, "stale", s1.ID(), l2.Token()); !errors.Is(err, client.ErrNotHolder) {
		t.Errorf("Release with another lease's token = %v, want ErrNotHolder", err)
	}
	info, err := c.Status(ctx, "stale")
	if err != nil {
		t.Fatal(err)
	}
	if h := info.GetHolder(); h.GetLeaseId() != s2.ID() || h.GetToken() != l2.Token() {
		t.Errorf("after stale releases the holder is %v, want s2 with token %d", h, l2.Token())
	}
}

func TestKVPutStaleToken(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.Addr)
	ctx := testCtx(t)
	s1, s2 := newSession(t, c), newSession(t, c)
	l1, err := s1.Acquire(ctx, "report:417:rebuild")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.KVGet(ctx, "report:417"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("KVGet of a missing key = %v, want ErrNotFound", err)
	}
	if err := c.KVPut(ctx, "report:417", []byte("v1"), l1.Token(), false); err != nil {
		t.Fatal(err)
	}
	if err := c.KVPut(ctx, "report:417", []byte("v1b"), l1.Token(), false); err != nil {
		t.Errorf("a second write with the same token (default mode) = %v, want accepted", err)
	}
	if err := c.KVPut(ctx, "report:417", []byte("v1c"), l1.Token(), true); !errors.Is(err, client.ErrStaleToken) {
		t.Errorf("a strict write with the same token = %v, want ErrStaleToken", err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := s2.Acquire(ctx, "report:417:rebuild")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.KVPut(ctx, "report:417", []byte("v2"), l2.Token(), false); err != nil {
		t.Fatal(err)
	}
	err = c.KVPut(ctx, "report:417", []byte("late"), l1.Token(), false)
	if !errors.Is(err, client.ErrStaleToken) {
		t.Fatalf("KVPut with the old token = %v, want ErrStaleToken", err)
	}
	if e := api.FromError(err); e.LastToken != l2.Token() {
		t.Errorf("LastToken = %d, want %d", e.LastToken, l2.Token())
	}
	v, tok, err := c.KVGet(ctx, "report:417")
	if err != nil {
		t.Fatal(err)
	}
	if string(v) != "v2" || tok != l2.Token() {
		t.Errorf("KVGet = %q token %d, want v2 token %d", v, tok, l2.Token())
	}
}

func TestSessionCloseReleasesLocks(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.Addr)
	ctx := testCtx(t)
	s1, s2 := newSession(t, c), newSession(t, c)
	l1, err := s1.Acquire(ctx, "closing")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *client.Lock, 1)
	go func() {
		l, err := s2.Acquire(ctx, "closing")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	eventually(t, 5*time.Second, "s2 to queue", func() bool {
		info, err := c.Status(ctx, "closing")
		return err == nil && len(info.GetWaiters()) == 1
	})
	if err := s1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !isClosed(s1.Done()) || !errors.Is(s1.Err(), client.ErrSessionClosed) {
		t.Errorf("after Close: Done closed %v, Err %v", isClosed(s1.Done()), s1.Err())
	}
	if !closedWithin(l1.Done(), time.Second) || !errors.Is(context.Cause(l1.Context()), client.ErrSessionClosed) {
		t.Errorf("lock of a closed session: cause %v, want ErrSessionClosed", context.Cause(l1.Context()))
	}
	l2 := recv(t, got, 5*time.Second, "s2's grant after s1 closed")
	if l2 == nil || l2.Token() <= l1.Token() {
		t.Fatalf("s2 got %v, want a token > %d", l2, l1.Token())
	}
	if err := s1.Close(ctx); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	if _, err := s1.Acquire(ctx, "closing-2"); !errors.Is(err, client.ErrSessionClosed) {
		t.Errorf("Acquire on a closed session = %v, want ErrSessionClosed", err)
	}
}

func TestOrphan(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.Addr)
	ctx := testCtx(t)
	s1 := newSession(t, c, client.WithTTL(time.Second))
	l1, err := s1.Acquire(ctx, "orphan")
	if err != nil {
		t.Fatal(err)
	}
	s1.Orphan()
	if !isClosed(s1.Done()) || !errors.Is(s1.Err(), client.ErrLeaseLost) {
		t.Fatalf("after Orphan: Done closed %v, Err %v, want closed with ErrLeaseLost", isClosed(s1.Done()), s1.Err())
	}
	if !closedWithin(l1.Done(), time.Second) {
		t.Fatal("Lock.Done not closed after Orphan")
	}
	if cause := context.Cause(l1.Context()); !errors.Is(cause, client.ErrLeaseLost) {
		t.Errorf("Lock.Context cause = %v, want ErrLeaseLost", cause)
	}
	if _, err := s1.Acquire(ctx, "orphan-2"); !errors.Is(err, client.ErrLeaseLost) {
		t.Errorf("Acquire on an orphaned session = %v, want ErrLeaseLost", err)
	}
	// The server still holds the lock for the orphan until its TTL ends,
	// then grants it to the next session.
	info, err := c.Status(ctx, "orphan")
	if err != nil {
		t.Fatal(err)
	}
	if info.GetHolder().GetLeaseId() != s1.ID() {
		t.Errorf("right after Orphan the holder is %v, want still %s", info.GetHolder(), s1.ID())
	}
	s2 := newSession(t, c)
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l2, err := s2.Acquire(actx, "orphan")
	if err != nil {
		t.Fatalf("Acquire after the orphan's TTL: %v", err)
	}
	if l2.Token() <= l1.Token() {
		t.Errorf("token after expiry %d, want > %d", l2.Token(), l1.Token())
	}
}

func TestSessionDeadline(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.Addr)
	ctx := testCtx(t)
	const ttl = time.Second
	safe := func(sent time.Time) time.Time {
		return sent.Add(ttl - time.Duration(float64(ttl)*drift) - margin)
	}
	inWindow := func(what string, d, sent, answered time.Time) {
		t.Helper()
		if d.Before(safe(sent)) || d.After(safe(answered)) {
			t.Errorf("%s: Deadline() = sent%+v, want in [sent + TTL·(1−drift) − margin, answered + …] = [%v, %v] after sent",
				what, d.Sub(sent), safe(sent).Sub(sent), safe(answered).Sub(sent))
		}
	}
	// No keepalive: only the create and the acquire renew.
	sent := time.Now()
	s, err := c.NewSession(ctx, client.WithTTL(ttl), client.WithKeepAliveInterval(time.Hour))
	answered := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.WithoutCancel(ctx))
	inWindow("after create", s.Deadline(), sent, answered)

	sent = time.Now()
	l, err := s.Acquire(ctx, "deadline")
	answered = time.Now()
	if err != nil {
		t.Fatal(err)
	}
	deadline := s.Deadline()
	inWindow("after acquire", deadline, sent, answered)

	if !closedWithin(l.Done(), 5*time.Second) {
		t.Fatal("Done not closed after the local deadline passed without a renewal")
	}
	if now := time.Now(); now.Before(deadline) {
		t.Errorf("Done closed %s before the deadline", deadline.Sub(now))
	}
	if !errors.Is(s.Err(), client.ErrLeaseLost) || !errors.Is(context.Cause(l.Context()), client.ErrLeaseLost) {
		t.Errorf("Err %v, cause %v, want ErrLeaseLost", s.Err(), context.Cause(l.Context()))
	}
}

func TestDoneFiresWhenServerStops(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.Addr, client.WithRetryTimeout(300*time.Millisecond))
	ctx := testCtx(t)
	const ttl = time.Second
	s, err := c.NewSession(ctx, client.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Orphan() // the server is gone: nothing to close there
	l, err := s.Acquire(ctx, "server-stops")
	if err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	if err := ts.Stop(); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(l.Done(), 5*time.Second) {
		t.Fatal("Done not closed after the server stopped")
	}
	fired := time.Now()
	if fired.Before(s.Deadline()) {
		t.Errorf("Done closed %s before the local deadline", s.Deadline().Sub(fired))
	}
	// The last renewal was sent before the stop, so the deadline is at most
	// TTL·(1−drift) − margin after it (plus scheduling slack).
	if late := fired.Sub(stopped); late > ttl+time.Second {
		t.Errorf("Done closed %s after the server stopped, want at most about the TTL", late)
	}
	if !errors.Is(context.Cause(l.Context()), client.ErrLeaseLost) || !errors.Is(s.Err(), client.ErrLeaseLost) {
		t.Errorf("cause %v, Err %v, want ErrLeaseLost", context.Cause(l.Context()), s.Err())
	}
}

func TestWatch(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.Addr)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	events := make(chan *client.Event, 64)
	watched := make(chan struct{})
	stream, err := c.Watch(ctx, "w:")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(watched)
		for ev, err := range stream {
			if err != nil {
				t.Errorf("watch: %v", err)
				return
			}
			select {
			case events <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	s := newSession(t, c)
	// The stream may start after the first lock event: repeat until one is
	// seen (each round is acquire then release of a fresh name).
	var first *client.Event
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; first == nil; i++ {
		if time.Now().After(deadline) {
			t.Fatal("no watch event")
		}
		l, err := s.Acquire(ctx, "w:x")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Acquire(ctx, "other"); err != nil { // not under the prefix
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case first = <-events:
		case <-time.After(100 * time.Millisecond):
		}
	}
	if first.GetName() != "w:x" || first.GetLeaseId() != s.ID() {
		t.Errorf("event %v, want one about w:x by %s", first, s.ID())
	}
	cancel()
	recv(t, watched, 5*time.Second, "Watch to end with its context")
}

// TestReleaseStopsLockWatcher: a long-lived session that acquires and
// releases many times must not accumulate a goroutine per lock.
func TestReleaseStopsLockWatcher(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.Addr)
	ctx := testCtx(t)
	s := newSession(t, c)
	warm, err := s.Acquire(ctx, "churn")
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	const n = 200
	for range n {
		l, err := s.Acquire(ctx, "churn")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 5*time.Second, "goroutines to settle", func() bool {
		return runtime.NumGoroutine() < before+n/4
	})
}
