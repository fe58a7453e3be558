package server_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/admission"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// parkedGauge is the node's count of parked Acquires.
const parkedGauge = "leasehold_acquires_queued"

// waitParked waits until the node counts n parked Acquires.
func waitParked(t *testing.T, c *servertest.Cluster, n int) {
	t.Helper()
	err := servertest.Eventually(10*time.Second, func() bool {
		v, err := servertest.ReadMetric(context.Background(), c.Addr, parkedGauge)
		return err == nil && v == float64(n)
	})
	if err != nil {
		t.Fatalf("%s is %v, want %d", parkedGauge, servertest.Metric(t, c.Addr, parkedGauge), n)
	}
}

// refusedBy is how often limit refused a request on c.
func refusedBy(t *testing.T, c *servertest.Cluster, limit string) string {
	t.Helper()
	return sampleOr(scrape(t, c), `leasehold_limit_refused_total{limit="`+limit+`"}`)
}

// park starts a blocking Acquire of name for lease on cl and returns its
// answer's channel and the func that cancels it.
func park(t *testing.T, cl client, name, lease string) (<-chan error, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctxT(t))
	t.Cleanup(cancel)
	return async(func() error {
		_, err := cl.Acquire(ctx, req(&pb.AcquireRequest{Name: name, LeaseId: lease}))
		return err
	}), cancel
}

// refusedAtOnce fails unless the blocking Acquire of name for lease is
// refused by limit at once, leaving the state as it was.
func refusedAtOnce(t *testing.T, c *servertest.Cluster, cl client, name, lease, limit string) {
	t.Helper()
	before := c.State()
	ctx, cancel := context.WithTimeout(ctxT(t), 5*time.Second)
	defer cancel()
	_, err := cl.Acquire(ctx, req(&pb.AcquireRequest{Name: name, LeaseId: lease}))
	wantLimit(t, "Acquire of "+name+" beyond the cap", err, limit)
	if !bytes.Equal(before, c.State()) {
		t.Fatalf("the refused Acquire of %s changed the state (waiters now %v)", name, waiters(status(t, cl, name)))
	}
}

// TestLimitQueuedPerSession: a session parks as many Acquires as
// queued-per-session allows; the next is refused at once, changing
// nothing, while another session still parks; once one returns a new one
// is admitted.
func TestLimitQueuedPerSession(t *testing.T) {
	const cap = 3
	c := servertest.Start(t, withLimits(func(l *admission.Limits) { l.QueuedPerSession, l.QueuedPerPrincipal = cap, 0 }))
	h := newSession(t, c.Client, 60_000, "H").GetLeaseId()
	s := newSession(t, c.Client, 60_000, "S").GetLeaseId()
	for i := range cap + 2 {
		acquire(t, c.Client, fmt.Sprint("qs:", i), h)
	}
	var cancels []context.CancelFunc
	var answers []<-chan error
	for i := range cap {
		ch, cancel := park(t, c.Client, fmt.Sprint("qs:", i), s)
		answers, cancels = append(answers, ch), append(cancels, cancel)
		waitQueued(t, c.Client, fmt.Sprint("qs:", i), s)
	}
	waitParked(t, c, cap)

	refusedAtOnce(t, c, c.Client, fmt.Sprint("qs:", cap), s, "queued-per-session")
	// Another request for a name the session waits for would park a
	// handler of its own: bounded as well.
	refusedAtOnce(t, c, c.Client, "qs:0", s, "queued-per-session")
	if got := refusedBy(t, c, "queued-per-session"); got != "2" {
		t.Fatalf("queued-per-session refusals counted %q, want 2", got)
	}

	// Another session is not bounded by S's count.
	other := newSession(t, c.Client, 60_000, "O").GetLeaseId()
	otherCh, cancelOther := park(t, c.Client, fmt.Sprint("qs:", cap), other)
	waitQueued(t, c.Client, fmt.Sprint("qs:", cap), other)
	waitParked(t, c, cap+1)
	cancelOther()
	wantCode(t, "O's Acquire", <-otherCh, api.CodeCanceled)

	// One of S's returns: S parks one more.
	cancels[0]()
	wantCode(t, "cancelled Acquire", <-answers[0], api.CodeCanceled)
	waitParked(t, c, cap-1)
	park(t, c.Client, fmt.Sprint("qs:", cap+1), s)
	waitQueued(t, c.Client, fmt.Sprint("qs:", cap+1), s)
	waitParked(t, c, cap)
	refusedAtOnce(t, c, c.Client, "qs:0", s, "queued-per-session")
}

// TestLimitQueuedPerPrincipal: the parked Acquires of one principal are
// bounded across its sessions; another principal still parks.
func TestLimitQueuedPerPrincipal(t *testing.T) {
	const cap = 3
	c := servertest.Start(t, withLimits(func(l *admission.Limits) { l.QueuedPerSession, l.QueuedPerPrincipal = 0, cap }))
	rt := h2c()
	t.Cleanup(rt.CloseIdleConnections)
	a, b := as(c, rt, "a"), as(c, rt, "b")
	h := newSession(t, b, 60_000, "H").GetLeaseId()
	acquire(t, b, "qp", h)
	var sessions []string
	for i := range cap + 1 {
		sessions = append(sessions, newSession(t, a, 60_000, fmt.Sprint("A", i)).GetLeaseId())
	}
	var cancels []context.CancelFunc
	for i := range cap {
		_, cancel := park(t, a, "qp", sessions[i])
		cancels = append(cancels, cancel)
		waitQueued(t, c.Client, "qp", sessions[:i+1]...)
	}
	waitParked(t, c, cap)
	refusedAtOnce(t, c, a, "qp", sessions[cap], "queued-per-principal")
	if got := refusedBy(t, c, "queued-per-principal"); got != "1" {
		t.Fatalf("queued-per-principal refusals counted %q, want 1", got)
	}

	// b is another principal.
	bs := newSession(t, b, 60_000, "B").GetLeaseId()
	_, cancelB := park(t, b, "qp", bs)
	waitQueued(t, c.Client, "qp", append(sessions[:cap:cap], bs)...)
	waitParked(t, c, cap+1)
	cancelB()
	waitParked(t, c, cap)

	// A request a follower forwarded is counted here, where it parks, for
	// the principal the follower names: a's is at its cap, another is not.
	forwarded := func(p string) *connect.Request[pb.AcquireRequest] {
		r := req(&pb.AcquireRequest{Name: "qp", LeaseId: sessions[cap]})
		r.Header().Set("Leasehold-Forwarded-By", "n2")
		r.Header().Set("Leasehold-Cluster-Id", c.Server().Node().ClusterID())
		r.Header().Set("Leasehold-Principal", p)
		return r
	}
	before := c.State()
	_, err := c.Client.Acquire(ctxT(t), forwarded("ip:"+sourceAddr("a"))) // a's principal (as)
	wantLimit(t, "Acquire forwarded for a", err, "queued-per-principal")
	if !bytes.Equal(before, c.State()) {
		t.Fatal("the refused forwarded Acquire changed the state")
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	fwd := async(func() error { _, err := c.Client.Acquire(ctx, forwarded("ip:10.9.9.9")); return err })
	waitQueued(t, c.Client, "qp", sessions...)
	waitParked(t, c, cap+1)
	cancel()
	wantCode(t, "forwarded Acquire", <-fwd, api.CodeCanceled)
	waitParked(t, c, cap)

	// One of a's returns: a parks again.
	cancels[0]()
	waitParked(t, c, cap-1)
	park(t, a, "qp", sessions[cap])
	waitParked(t, c, cap)
}

// TestLimitQueuedReturns: a parked Acquire gives its place back on every
// way it ends (granted, cancelled, its wait_ms over, its session closed,
// a failed proposal), and one granted at once holds none: with a cap of
// one, the session parks again after each.
func TestLimitQueuedReturns(t *testing.T) {
	c := servertest.Start(t, withLimits(func(l *admission.Limits) { l.QueuedPerSession, l.QueuedPerPrincipal = 1, 1 }))
	h := newSession(t, c.Client, 60_000, "H").GetLeaseId()
	held := acquire(t, c.Client, "qr", h)
	ends := []struct {
		name string
		code api.Code
		end  func(s string, cancel context.CancelFunc)
	}{
		{"cancelled", api.CodeCanceled, func(_ string, cancel context.CancelFunc) { cancel() }},
		{"session closed", api.CodeLeaseExpired, func(s string, _ context.CancelFunc) {
			_, err := c.Client.CloseSession(ctxT(t), req(&pb.CloseSessionRequest{LeaseId: s}))
			mustOK(t, "CloseSession", err)
		}},
		{"granted", "", func(string, context.CancelFunc) {
			_, err := c.Client.Release(ctxT(t), req(&pb.ReleaseRequest{Name: "qr", LeaseId: h, Token: held.GetToken()}))
			mustOK(t, "Release", err)
		}},
	}
	for _, e := range ends {
		s := newSession(t, c.Client, 60_000, e.name).GetLeaseId()
		ch, cancel := park(t, c.Client, "qr", s)
		waitQueued(t, c.Client, "qr", s)
		waitParked(t, c, 1)
		refusedAtOnce(t, c, c.Client, "qr", s, "queued-per-session")
		e.end(s, cancel)
		if err := <-ch; e.code == "" {
			mustOK(t, e.name, err)
		} else {
			wantCode(t, e.name, err, e.code)
		}
		waitParked(t, c, 0)
	}
	// An Acquire whose wait_ms runs out, on another held lock, twice.
	h2 := newSession(t, c.Client, 60_000, "H2").GetLeaseId()
	acquire(t, c.Client, "qw", h2)
	s := newSession(t, c.Client, 60_000, "W").GetLeaseId()
	for range 2 {
		_, err := c.Client.Acquire(ctxT(t), req(&pb.AcquireRequest{Name: "qw", LeaseId: s, WaitMs: 100}))
		wantCode(t, "Acquire past its wait_ms", err, api.CodeDeadlineExceeded)
		waitParked(t, c, 0)
	}
	// Granted at once, and a proposal that fails: neither keeps a place.
	for i := range 3 {
		acquire(t, c.Client, fmt.Sprint("qf:", i), s)
	}
	_, err := c.Client.Acquire(ctxT(t), req(&pb.AcquireRequest{Name: "qf:x", LeaseId: servertest.UnknownLeaseID()}))
	wantCode(t, "Acquire of an unknown session", err, api.CodeLeaseExpired)
	_, err = c.Client.Acquire(ctxT(t), req(&pb.AcquireRequest{Name: "qf:x", LeaseId: servertest.UnknownLeaseID()}))
	wantCode(t, "Acquire of an unknown session", err, api.CodeLeaseExpired)
	waitParked(t, c, 0)
	// The session still parks one.
	park(t, c.Client, "qw", s)
	waitQueued(t, c.Client, "qw", s)
	waitParked(t, c, 1)
}

// TestLimitQueuedLockStream: the Acquires a lock stream parks are bounded
// as unary ones are, and the stream's end gives their places back.
func TestLimitQueuedLockStream(t *testing.T) {
	const cap = 2
	c := servertest.Start(t, withLimits(func(l *admission.Limits) { l.QueuedPerSession, l.QueuedPerPrincipal = cap, 0 }))
	h := newSession(t, c.Client, 60_000, "H").GetLeaseId()
	s := newSession(t, c.Client, 60_000, "S").GetLeaseId()
	for i := range cap + 1 {
		acquire(t, c.Client, fmt.Sprint("ql:", i), h)
	}
	ls := openLockStream(t, c.Client)
	for i := range cap {
		lsSend(t, ls, lsAcquire(uint64(i+1), fmt.Sprint("ql:", i), s))
		waitQueued(t, c.Client, fmt.Sprint("ql:", i), s)
	}
	waitParked(t, c, cap)
	before := c.State()
	lsSend(t, ls, lsAcquire(cap+1, fmt.Sprint("ql:", cap), s))
	m := lsRecv(t, ls, cap+1)[cap+1]
	if lsCode(m) != api.CodeResourceExhausted || !bytes.Contains([]byte(m.GetMessage()), []byte("serve --limit queued-per-session=N")) {
		t.Fatalf("Acquire beyond the cap on the stream answered %v, want resource-exhausted naming queued-per-session", m)
	}
	if !bytes.Equal(before, c.State()) {
		t.Fatal("the refused stream Acquire changed the state")
	}
	// A unary Acquire of the same session is bounded by the same count.
	refusedAtOnce(t, c, c.Client, fmt.Sprint("ql:", cap), s, "queued-per-session")

	// Cancelling one on the stream gives its place back.
	lsSend(t, ls, &pb.LockStreamRequest{Op: &pb.LockStreamRequest_Cancel{Cancel: 1}})
	if m := lsRecv(t, ls, 1)[1]; lsCode(m) != api.CodeCanceled {
		t.Fatalf("cancelled Acquire answered %v, want canceled", m)
	}
	waitParked(t, c, cap-1)
	lsSend(t, ls, lsAcquire(cap+2, fmt.Sprint("ql:", cap), s))
	waitQueued(t, c.Client, fmt.Sprint("ql:", cap), s)
	waitParked(t, c, cap)

	// The stream ends: every place is given back.
	mustOK(t, "close", ls.CloseResponse())
	waitParked(t, c, 0)
	for i := range cap + 1 {
		waitQueued(t, c.Client, fmt.Sprint("ql:", i))
	}
}

// TestLimitQueuedRetryFlood: many concurrent retries of one queue entry
// (the same name and wait id) each park a handler; no more than the cap
// are admitted however they race, the rest are refused at once, and the
// queue holds the one entry.
func TestLimitQueuedRetryFlood(t *testing.T) {
	const cap, flood = 5, 40
	c := servertest.Start(t, withLimits(func(l *admission.Limits) { l.QueuedPerSession, l.QueuedPerPrincipal = cap, 0 }))
	h := newSession(t, c.Client, 60_000, "H").GetLeaseId()
	s := newSession(t, c.Client, 60_000, "S").GetLeaseId()
	acquire(t, c.Client, "qf", h)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	answers := make(chan error, flood)
	for range flood {
		go func() {
			_, err := c.Client.Acquire(ctx, req(&pb.AcquireRequest{Name: "qf", LeaseId: s, WaitId: 42}))
			answers <- err
		}()
	}
	for range flood - cap {
		select {
		case err := <-answers:
			wantLimit(t, "a retry beyond the cap", err, "queued-per-session")
		case <-time.After(10 * time.Second):
			t.Fatal("fewer retries refused than sent beyond the cap")
		}
	}
	waitParked(t, c, cap)
	waitQueued(t, c.Client, "qf", s)
	if got := refusedBy(t, c, "queued-per-session"); got != fmt.Sprint(flood-cap) {
		t.Fatalf("queued-per-session refusals counted %q, want %d", got, flood-cap)
	}
	cancel()
	for range cap {
		if err := <-answers; api.CodeOf(err) == api.CodeResourceExhausted {
			t.Fatalf("a parked retry answered %v", err)
		}
	}
	waitParked(t, c, 0)
	waitQueued(t, c.Client, "qf")
}
