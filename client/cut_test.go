package client_test

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/harness/cutreply"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// cutHandler serves the real API but, while cuts > 0, cuts the reply off
// after its headers: the request runs to completion on the server, the
// caller gets the response headers, and then the stream is reset.
type cutHandler struct {
	h    http.Handler
	cuts atomic.Int32
}

func (c *cutHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c.cuts.Add(-1) < 0 {
		c.cuts.Add(1)
		c.h.ServeHTTP(w, r)
		return
	}
	cutreply.Serve(c.h, w, r)
}

// serveCut serves ts's API through a cutHandler on a new 127.0.0.1 port.
func serveCut(t *testing.T, ts *testServer) (string, *cutHandler) {
	ch := &cutHandler{h: ts.Server().Handler()}
	return serveHandler(t, ch), ch
}

// A reply cut off after the request was sent: a write says
// outcome-unknown (it did apply), never internal; a read is asked again.
func TestCutReply(t *testing.T) {
	ts := startServer(t)
	ctx := testCtx(t)
	direct := dial(t, ts.Addr)
	addr, cut := serveCut(t, ts)
	// The unary lock RPCs; TestLockStreamCut cuts the lock stream.
	c := dial(t, addr, client.WithUnaryLocks())
	s := newSession(t, direct)
	l, err := s.Acquire(ctx, "cut")
	if err != nil {
		t.Fatal(err)
	}

	cut.cuts.Store(1)
	err = c.KVPut(ctx, "cut", []byte("v"), l.Token(), false)
	if !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("KVPut with its reply cut = %v (code %s), want outcome-unknown", err, api.CodeOf(err))
	}
	if v, _, err := direct.KVGet(ctx, "cut"); err != nil || string(v) != "v" {
		t.Fatalf("the KVPut did apply: KVGet = %q, %v", v, err)
	}

	cut.cuts.Store(1)
	if _, _, err := c.KVGet(ctx, "cut"); err != nil {
		t.Fatalf("KVGet with its first reply cut = %v (code %s), want it asked again", err, api.CodeOf(err))
	}
	cut.cuts.Store(1)
	if _, err := c.Status(ctx, "cut"); err != nil {
		t.Fatalf("Status with its first reply cut = %v (code %s), want it asked again", err, api.CodeOf(err))
	}

	// A release with its reply cut is asked again: the holding is gone,
	// so it is released. With every reply cut it stays outcome-unknown.
	cut.cuts.Store(1)
	if err := c.Release(ctx, "cut", l.LeaseID(), l.Token()); err != nil {
		t.Fatalf("Release with its first reply cut = %v (code %s), want it confirmed by a second release", err, api.CodeOf(err))
	}
	if info, err := direct.Status(ctx, "cut"); err != nil || info.GetHolder() != nil {
		t.Fatalf("the Release did apply: %v, %v", info, err)
	}
	lr, err := s.Acquire(ctx, "cut")
	if err != nil {
		t.Fatal(err)
	}
	cut.cuts.Store(2)
	err = c.Release(ctx, "cut", lr.LeaseID(), lr.Token())
	if !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("Release with both replies cut = %v (code %s), want outcome-unknown", err, api.CodeOf(err))
	}
	if info, err := direct.Status(ctx, "cut"); err != nil || info.GetHolder() != nil {
		t.Fatalf("the Release did apply: %v, %v", info, err)
	}

	// A caller's own deadline on a write it sent: outcome-unknown too.
	dctx, cancel := context.WithCancel(ctx)
	cut.cuts.Store(0)
	l2, err := s.Acquire(ctx, "cut")
	if err != nil {
		t.Fatal(err)
	}
	slow := &cancelOnRequest{h: ts.Server().Handler(), cancel: cancel}
	addr2 := serveHandler(t, slow)
	c2 := dial(t, addr2)
	err = c2.KVPut(dctx, "cut", []byte("w"), l2.Token(), false)
	if !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("KVPut cancelled by its caller after it was sent = %v (code %s), want outcome-unknown", err, api.CodeOf(err))
	}
	// Cancelled before anything was sent: canceled, not deadline-exceeded.
	if _, err := c2.Status(dctx, "cut"); !errors.Is(err, client.ErrCanceled) {
		t.Fatalf("Status with a cancelled context = %v (code %s), want canceled", err, api.CodeOf(err))
	}
}

// cancelOnRequest cancels the caller's context once the request reached
// the server, then serves it: the answer arrives after the caller left.
type cancelOnRequest struct {
	h      http.Handler
	cancel context.CancelFunc
}

func (c *cancelOnRequest) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.cancel()
	c.h.ServeHTTP(w, r)
}

// serveHandler serves h on a new 127.0.0.1 port until the test ends.
func serveHandler(t *testing.T, h http.Handler) string {
	return servertest.Serve(t, h)
}

// noQuorum answers the first CreateSession with `unavailable` (no leader)
// and holds every later one until its deadline, as a node that lost its
// quorum does while it still believes it leads, then answers with atDeadline.
type noQuorum struct {
	leaseholdv1connect.UnimplementedLeaseholdServiceHandler
	calls      atomic.Int32
	atDeadline func(ctx context.Context) error
}

func (n *noQuorum) CreateSession(ctx context.Context, _ *connect.Request[pb.CreateSessionRequest]) (*connect.Response[pb.CreateSessionResponse], error) {
	if n.calls.Add(1) == 1 {
		return nil, api.ToConnect(api.Errorf(api.CodeUnavailable, "no leader is known to node n1"))
	}
	<-ctx.Done()
	return nil, n.atDeadline(ctx)
}

// A call refused as unavailable whose retry is cut off by the request's
// deadline reports unavailable (with the refusal's reason), not a bare
// deadline-exceeded, whichever side noticed the deadline first and
// whatever the server answered then: the cluster had no quorum, which is
// what the caller needs to know.
func TestDeadlineAfterUnavailableSaysUnavailable(t *testing.T) {
	for name, answer := range map[string]func(ctx context.Context) error{
		"outcome-unknown": func(context.Context) error {
			return api.ToConnect(api.Errorf(api.CodeOutcomeUnknown, "context deadline exceeded"))
		},
		"deadline-exceeded": func(context.Context) error {
			return api.ToConnect(api.Errorf(api.CodeDeadlineExceeded, "context deadline exceeded"))
		},
		"bare": func(ctx context.Context) error { return ctx.Err() },
	} {
		t.Run(name, func(t *testing.T) {
			nq := &noQuorum{atDeadline: answer}
			_, h := leaseholdv1connect.NewLeaseholdServiceHandler(nq)
			c := dial(t, serveHandler(t, h))
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err := c.NewSession(ctx)
			if api.CodeOf(err) != api.CodeUnavailable || !strings.Contains(err.Error(), "no leader is known") {
				t.Fatalf("NewSession against a node without quorum: %v (code %s), want unavailable naming the refusal", err, api.CodeOf(err))
			}
			if n := nq.calls.Load(); n < 2 {
				t.Fatalf("%d attempts, want the refusal retried", n)
			}
			// A caller's cancel is still reported as canceled.
			cctx, ccancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, ccancel)
			nq.calls.Store(0)
			if _, err := c.NewSession(cctx); api.CodeOf(err) != api.CodeCanceled {
				t.Fatalf("canceled NewSession: %v (code %s), want canceled", err, api.CodeOf(err))
			}
		})
	}
}

// statusNode answers Status: refusing the first refuse calls as not-leader
// (an answer, as during an election), then with an empty lock, naming
// leader in the Leasehold-Leader header when it is set.
type statusNode struct {
	leaseholdv1connect.UnimplementedLeaseholdServiceHandler
	refuse int32
	leader string
	calls  atomic.Int32
}

func (n *statusNode) Status(context.Context, *connect.Request[pb.StatusRequest]) (*connect.Response[pb.StatusResponse], error) {
	if n.calls.Add(1) <= n.refuse {
		return nil, api.ToConnect(api.Errorf(api.CodeNotLeader, "this node does not lead"))
	}
	res := connect.NewResponse(&pb.StatusResponse{})
	if n.leader != "" {
		res.Header().Set(api.LeaderHeader, n.leader)
	}
	return res, nil
}

// A node that answered not-leader (as during an election) is taken as the
// leader when a follower names it afterwards: only an endpoint that gave no
// answer at all is passed over for a while.
func TestLeaderThatRefusedIsFollowed(t *testing.T) {
	b := &statusNode{refuse: 1}
	_, hb := leaseholdv1connect.NewLeaseholdServiceHandler(b)
	addrB := serveHandler(t, hb)
	a := &statusNode{leader: addrB}
	_, ha := leaseholdv1connect.NewLeaseholdServiceHandler(a)
	addrA := serveHandler(t, ha)
	c := dial(t, addrB+","+addrA)
	ctx := testCtx(t)
	for i := range 3 {
		if _, err := c.Status(ctx, "x"); err != nil {
			t.Fatalf("Status %d: %v", i, err)
		}
	}
	// B refused the first call, A answered it and named B, so the next two
	// go to B.
	if got := b.calls.Load(); got != 3 {
		t.Fatalf("B got %d calls, A %d; want B the 2nd and 3rd after its refusal and A's naming it", got, a.calls.Load())
	}
}

// A re-entrant AcquireIn (acquire NAME --session ID) whose replies are cut
// off until its deadline withdraws its own request, and that withdrawal
// releases nothing: the holding was created by an earlier request, whose
// caller learned it.
func TestReentrantAcquireInCutKeepsTheHolding(t *testing.T) {
	ts := startServer(t)
	ctx := testCtx(t)
	direct := dial(t, ts.Addr)
	var cutting atomic.Bool
	addr := serveCutting(t, ts.Server().Handler(), func(p string) bool {
		return cutting.Load() && p == leaseholdv1connect.LeaseholdServiceTryAcquireProcedure
	})
	c := dial(t, addr, client.WithUnaryLocks())
	s := newSession(t, direct)
	first, err := c.AcquireIn(ctx, s.ID(), "re-1", true)
	if err != nil {
		t.Fatal(err)
	}
	cutting.Store(true)
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := c.AcquireIn(cctx, s.ID(), "re-1", true); err == nil {
		t.Fatal("an AcquireIn with its replies cut succeeded")
	}
	info, err := direct.Status(ctx, "re-1")
	if err != nil {
		t.Fatal(err)
	}
	if h := info.GetHolder(); h.GetLeaseId() != s.ID() || h.GetToken() != first.GetToken() {
		t.Fatalf("after the second caller's withdrawal, re-1 is held by %v; the first caller holds token %d", h, first.GetToken())
	}
}

// serveLosing serves h on a new listener that, while cut is set, cuts
// every TryAcquire's reply after the server applied it, and while
// failWithdraw is set, answers every CancelWait with 503 without passing
// it on.
func serveLosing(t *testing.T, h http.Handler) (addr string, cut, failWithdraw *atomic.Bool) {
	cut, failWithdraw = new(atomic.Bool), new(atomic.Bool)
	addr = serveHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case cut.Load() && r.URL.Path == leaseholdv1connect.LeaseholdServiceTryAcquireProcedure:
			cutreply.Serve(h, w, r) // applied, then the reply is lost
		case failWithdraw.Load() && r.URL.Path == leaseholdv1connect.LeaseholdServiceCancelWaitProcedure:
			http.Error(w, "unavailable", http.StatusServiceUnavailable) // never reaches the server
		default:
			h.ServeHTTP(w, r)
		}
	}))
	return addr, cut, failWithdraw
}

// A session's Acquire granted on the server whose replies and withdrawal
// are all lost ends outcome-unknown; the session's next Acquire of the
// name is a retry of that request, so when its replies are lost too, its
// withdrawal releases the grant nobody learned instead of leaving the
// name held until the session ends.
func TestAcquireRetryAfterLostWithdrawalReleasesTheGrant(t *testing.T) {
	ts := startServer(t)
	ctx := testCtx(t)
	direct := dial(t, ts.Addr)
	addr, cutAcquire, failWithdraw := serveLosing(t, ts.Server().Handler())
	c := dial(t, addr, client.WithUnaryLocks())
	s, err := c.NewSession(ctx, client.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	try := func() error {
		actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := s.TryAcquire(actx, "re-2")
		return err
	}
	cutAcquire.Store(true)
	failWithdraw.Store(true)
	if err := try(); !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("TryAcquire with its replies and withdrawal lost = %v (code %s), want outcome-unknown", err, api.CodeOf(err))
	}
	info, err := direct.Status(ctx, "re-2")
	if err != nil {
		t.Fatal(err)
	}
	if info.GetHolder().GetLeaseId() != s.ID() {
		t.Fatalf("the first attempt was not granted on the server (holder %v); the test needs it granted", info.GetHolder())
	}
	failWithdraw.Store(false)
	if err := try(); err == nil || errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("the retry with its replies lost = %v (code %s), want a failure that withdrew it", err, api.CodeOf(err))
	}
	info, err = direct.Status(ctx, "re-2")
	if err != nil {
		t.Fatal(err)
	}
	if hd := info.GetHolder(); hd != nil {
		t.Fatalf("after the retry withdrew, re-2 is still held by %v, a grant nobody learned", hd)
	}
	cutAcquire.Store(false)
	l, err := s.TryAcquire(ctx, "re-2")
	if err != nil {
		t.Fatalf("the session's next TryAcquire: %v", err)
	}
	if info, err = direct.Status(ctx, "re-2"); err != nil || info.GetHolder().GetToken() != l.Token() {
		t.Fatalf("re-2 held by %v (%v), want the learned token %d", info.GetHolder(), err, l.Token())
	}
}

// A session's Acquire whose replies are lost, and whose withdrawal applied
// on the server but lost its reply too, leaves its wait id unsettled; the
// server then refuses that wait id (it was withdrawn). The session's next
// Acquire of the name learns from that refusal that nothing of the earlier
// attempt is held, asks again with a new wait id, and is granted.
func TestAcquireAfterAWithdrawalWhoseReplyWasLost(t *testing.T) {
	ts := startServer(t)
	ctx := testCtx(t)
	var cutting atomic.Bool
	addr := serveCutting(t, ts.Server().Handler(), func(p string) bool {
		return cutting.Load() && (p == leaseholdv1connect.LeaseholdServiceTryAcquireProcedure || p == leaseholdv1connect.LeaseholdServiceCancelWaitProcedure)
	})
	c := dial(t, addr, client.WithUnaryLocks())
	s, err := c.NewSession(ctx, client.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	cutting.Store(true)
	actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = s.TryAcquire(actx, "re-3")
	cancel()
	if !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("TryAcquire with its replies and its withdrawal's lost = %v (code %s), want outcome-unknown", err, api.CodeOf(err))
	}
	cutting.Store(false)
	l, err := s.TryAcquire(ctx, "re-3")
	if err != nil {
		t.Fatalf("the next TryAcquire, after the withdrawal applied: %v (code %s)", err, api.CodeOf(err))
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// serveCutting serves h on a new address, but the replies of the requests
// whose path cut names are lost once they applied (cutreply.Serve).
func serveCutting(t *testing.T, h http.Handler, cut func(path string) bool) string {
	return serveHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cut(r.URL.Path) {
			cutreply.Serve(h, w, r) // applied, then the reply is lost
			return
		}
		h.ServeHTTP(w, r)
	}))
}

// An AcquireIn granted on the server whose replies and withdrawal are all
// lost ends outcome-unknown naming its wait id. Another client (another
// process: acquire --session --wait-id) retrying with that id is that
// request: it learns the grant, and when its own replies are lost, its
// withdrawal releases the grant (a fresh wait id's withdrawal would leave
// the session's holding, which it did not create, until the session ends).
func TestAcquireInRetriedByItsWaitID(t *testing.T) {
	ts := startServer(t)
	ctx := testCtx(t)
	direct := dial(t, ts.Addr)
	addr, cutAcquire, failWithdraw := serveLosing(t, ts.Server().Handler())
	cutAcquire.Store(true)
	cutting := dial(t, addr, client.WithUnaryLocks())
	s := newSession(t, direct)
	lost := func(name string, opts ...client.AcquireOption) (uint64, uint64) {
		t.Helper()
		failWithdraw.Store(true)
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := cutting.AcquireIn(cctx, s.ID(), name, true, opts...)
		if !errors.Is(err, client.ErrOutcomeUnknown) {
			t.Fatalf("AcquireIn with its replies and withdrawal lost = %v, want outcome-unknown", err)
		}
		m := regexp.MustCompile(`retry with wait id (\d+)`).FindStringSubmatch(err.Error())
		if m == nil {
			t.Fatalf("the outcome-unknown error names no wait id: %v", err)
		}
		id, _ := strconv.ParseUint(m[1], 10, 64)
		info, err := direct.Status(ctx, name)
		if err != nil || info.GetHolder().GetLeaseId() != s.ID() {
			t.Fatalf("the first attempt was not granted on the server (holder %v, %v); the test needs it granted", info.GetHolder(), err)
		}
		return id, info.GetHolder().GetToken()
	}

	id, token := lost("re-4")
	got, err := direct.AcquireIn(ctx, s.ID(), "re-4", true, client.WithWaitID(id))
	if err != nil || got.GetToken() != token {
		t.Fatalf("the retry by wait id = %v, %v; want the grant nobody learned (token %d)", got, err, token)
	}

	id, _ = lost("re-6")
	failWithdraw.Store(false)
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := cutting.AcquireIn(cctx, s.ID(), "re-6", true, client.WithWaitID(id)); err == nil || errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("the retry with its replies lost = %v, want a failure that withdrew it", err)
	}
	if info, err := direct.Status(ctx, "re-6"); err != nil || info.GetHolder() != nil {
		t.Fatalf("after the retry withdrew, re-6 is held by %v (%v), a grant nobody learned", info.GetHolder(), err)
	}

	if _, err := s.TryAcquire(ctx, "re-5", client.WithWaitID(id)); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("Session.TryAcquire with WithWaitID = %v, want invalid-argument", err)
	}
}
