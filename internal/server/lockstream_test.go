package server_test

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/admission"
	"github.com/leasehold/leasehold/internal/harness/servertest"
	"github.com/leasehold/leasehold/internal/server"
)

type lockStream = connect.BidiStreamForClient[pb.LockStreamRequest, pb.LockStreamResponse]

// openLockStream opens a LockStream that is closed when the test ends.
func openLockStream(t *testing.T, c client) *lockStream {
	t.Helper()
	ls := c.LockStream(ctxT(t))
	t.Cleanup(func() {
		_ = ls.CloseRequest()
		_ = ls.CloseResponse()
	})
	return ls
}

func lsSend(t *testing.T, ls *lockStream, m *pb.LockStreamRequest) {
	t.Helper()
	mustOK(t, "LockStream send", ls.Send(m))
}

// lsRecv receives answers until it has one for each id, in any order.
func lsRecv(t *testing.T, ls *lockStream, ids ...uint64) map[uint64]*pb.LockStreamResponse {
	t.Helper()
	got := map[uint64]*pb.LockStreamResponse{}
	for len(got) < len(ids) {
		m, err := ls.Receive()
		mustOK(t, "LockStream receive", err)
		got[m.GetId()] = m
	}
	for _, id := range ids {
		if got[id] == nil {
			t.Fatalf("no answer to request %d; got %v", id, got)
		}
	}
	return got
}

func lsCode(m *pb.LockStreamResponse) api.Code { return api.Code(m.GetError().GetCode()) }

func lsAcquire(id uint64, name, lease string) *pb.LockStreamRequest {
	return &pb.LockStreamRequest{Id: id, Op: &pb.LockStreamRequest_Acquire{Acquire: &pb.AcquireRequest{Name: name, LeaseId: lease}}}
}

func lsTry(id uint64, name, lease string) *pb.LockStreamRequest {
	return &pb.LockStreamRequest{Id: id, Op: &pb.LockStreamRequest_TryAcquire{TryAcquire: &pb.TryAcquireRequest{Name: name, LeaseId: lease}}}
}

// Requests on one stream run concurrently and are answered as each
// completes: a queued Acquire does not hold up the requests behind it.
// Refusals carry the code and fields of the unary RPC's; bad requests are
// refused alone and the stream goes on.
func TestLockStreamOutOfOrder(t *testing.T) {
	c := servertest.Start(t, servertest.Options{})
	a := newSession(t, c.Client, 60_000, "A").GetLeaseId()
	b := newSession(t, c.Client, 60_000, "B").GetLeaseId()
	held := acquire(t, c.Client, "oo:x", a)
	ls := openLockStream(t, c.Client)
	lsSend(t, ls, lsAcquire(1, "oo:x", b)) // queues behind A
	lsSend(t, ls, lsTry(2, "oo:y", b))
	lsSend(t, ls, lsTry(3, "oo:x", b))
	got := lsRecv(t, ls, 2, 3)
	if got[2].GetTryAcquire().GetHolding().GetToken() <= held.GetToken() {
		t.Fatalf("TryAcquire oo:y answered %v", got[2])
	}
	if lsCode(got[3]) != api.CodeLocked || !strings.Contains(got[3].GetMessage(), `"A"`) {
		t.Fatalf("TryAcquire of a held name answered %v, want locked naming the holder", got[3])
	}
	waitQueued(t, c.Client, "oo:x", b)
	// Bad requests: refused, the stream goes on.
	lsSend(t, ls, lsTry(0, "oo:z", b))
	lsSend(t, ls, &pb.LockStreamRequest{Id: 4})
	lsSend(t, ls, &pb.LockStreamRequest{Id: 5, TimeoutMs: -1, Op: &pb.LockStreamRequest_TryAcquire{TryAcquire: &pb.TryAcquireRequest{Name: "oo:z", LeaseId: b}}})
	lsSend(t, ls, lsTry(6, "", b))
	got = lsRecv(t, ls, 0, 4, 5, 6)
	for id, m := range got {
		if lsCode(m) != api.CodeInvalidArgument {
			t.Errorf("bad request %d answered %v, want invalid-argument", id, m)
		}
	}
	// A's release hands oo:x to B's queued Acquire (id 1); the release
	// on the stream names the next holder as the unary RPC does.
	lsSend(t, ls, &pb.LockStreamRequest{Id: 7, Op: &pb.LockStreamRequest_Release{Release: &pb.ReleaseRequest{Name: "oo:x", LeaseId: a, Token: held.GetToken()}}})
	got = lsRecv(t, ls, 1, 7)
	if got[7].GetRelease() == nil || got[7].GetRelease().GetNext().GetLeaseId() != b {
		t.Fatalf("Release answered %v, want B as the next holder", got[7])
	}
	if h := got[1].GetAcquire().GetHolding(); h.GetLeaseId() != b || h.GetToken() <= got[2].GetTryAcquire().GetHolding().GetToken() {
		t.Fatalf("queued Acquire answered %v", got[1])
	}
	lsSend(t, ls, &pb.LockStreamRequest{Id: 8, Op: &pb.LockStreamRequest_Release{Release: &pb.ReleaseRequest{Name: "oo:x", LeaseId: a, Token: held.GetToken()}}})
	if m := lsRecv(t, ls, 8)[8]; lsCode(m) != api.CodeNotHolder {
		t.Fatalf("stale Release answered %v, want not-holder", m)
	}
	// An id already in flight cannot be answered unambiguously: the
	// stream ends with invalid-argument, and what was in flight is
	// cancelled (the queued Acquire withdrawn). The state can show the
	// Acquire queued a moment before its handler has heard that its entry
	// applied; a cancel in that moment is answered outcome-unknown, as a
	// unary call cancelled while its entry is in flight is, and the wait is
	// withdrawn all the same.
	lsSend(t, ls, lsAcquire(9, "oo:x", a))
	waitQueued(t, c.Client, "oo:x", a)
	lsSend(t, ls, lsTry(9, "oo:w", a))
	for {
		m, err := ls.Receive()
		if err != nil {
			wantCode(t, "the stream after a request id in flight was sent again", err, api.CodeInvalidArgument)
			break
		}
		if code := lsCode(m); m.GetId() != 9 || code != api.CodeCanceled && code != api.CodeOutcomeUnknown {
			t.Fatalf("a request id in flight sent again: answer %v; want the first one cancelled", m)
		}
	}
	waitQueued(t, c.Client, "oo:x")
}

func lsCreate(id uint64, ttlMs int64, owner string) *pb.LockStreamRequest {
	return &pb.LockStreamRequest{Id: id, Op: &pb.LockStreamRequest_CreateSession{CreateSession: &pb.CreateSessionRequest{TtlMs: ttlMs, Owner: owner}}}
}

func lsKeepAlive(id uint64, lease string) *pb.LockStreamRequest {
	return &pb.LockStreamRequest{Id: id, Op: &pb.LockStreamRequest_KeepAlive{KeepAlive: &pb.KeepAliveRequest{LeaseId: lease}}}
}

func lsClose(id uint64, lease string) *pb.LockStreamRequest {
	return &pb.LockStreamRequest{Id: id, Op: &pb.LockStreamRequest_CloseSession{CloseSession: &pb.CloseSessionRequest{LeaseId: lease}}}
}

// The session operations travel on the stream as their unary RPCs: a
// session created there holds locks, is renewed and is closed (its locks
// released) there, and the response header says the stream takes them.
// Bad input is refused alone and changes nothing.
func TestLockStreamSessionOps(t *testing.T) {
	c := servertest.Start(t, servertest.Options{})
	ls := openLockStream(t, c.Client)
	lsSend(t, ls, lsCreate(1, 60_000, "S"))
	lsSend(t, ls, lsCreate(2, 0, "S"))
	lsSend(t, ls, lsCreate(3, 60_000, strings.Repeat("o", 1000)))
	got := lsRecv(t, ls, 1, 2, 3)
	if h := ls.ResponseHeader().Get(api.StreamOpsHeader); h != "session,batch" {
		t.Fatalf("response header %s = %q, want %q", api.StreamOpsHeader, h, "session,batch")
	}
	cs := got[1].GetCreateSession()
	if cs.GetLeaseId() == "" || cs.GetTtlMs() != 60_000 || cs.GetOwner() != "S" {
		t.Fatalf("CreateSession answered %v", got[1])
	}
	for _, id := range []uint64{2, 3} {
		if lsCode(got[id]) != api.CodeInvalidArgument {
			t.Errorf("bad CreateSession %d answered %v, want invalid-argument", id, got[id])
		}
	}
	lease := cs.GetLeaseId()
	lsSend(t, ls, lsTry(4, "so:x", lease))
	lsSend(t, ls, lsKeepAlive(5, lease))
	lsSend(t, ls, lsKeepAlive(6, ""))
	got = lsRecv(t, ls, 4, 5, 6)
	if got[4].GetTryAcquire().GetHolding().GetLeaseId() != lease {
		t.Fatalf("TryAcquire with the stream's session answered %v", got[4])
	}
	if ka := got[5].GetKeepAlive(); ka.GetLeaseId() != lease || ka.GetTtlMs() != 60_000 {
		t.Fatalf("KeepAlive answered %v", got[5])
	}
	if lsCode(got[6]) != api.CodeInvalidArgument {
		t.Errorf("KeepAlive without a lease id answered %v, want invalid-argument", got[6])
	}
	sessions, err := c.Client.ListSessions(ctxT(t), req(&pb.ListSessionsRequest{}))
	mustOK(t, "ListSessions", err)
	if n := len(sessions.Msg.GetSessions()); n != 1 {
		t.Fatalf("%d sessions after one CreateSession and two refused ones, want 1", n)
	}
	lsSend(t, ls, lsClose(7, lease))
	if m := lsRecv(t, ls, 7)[7]; !slices.Equal(m.GetCloseSession().GetReleased(), []string{"so:x"}) {
		t.Fatalf("CloseSession answered %v, want so:x released", m)
	}
	if status(t, c.Client, "so:x").GetHolder() != nil {
		t.Fatal("so:x is still held after its session was closed")
	}
	lsSend(t, ls, lsKeepAlive(8, lease))
	lsSend(t, ls, lsClose(9, lease))
	got = lsRecv(t, ls, 8, 9)
	for _, id := range []uint64{8, 9} {
		if lsCode(got[id]) != api.CodeLeaseExpired {
			t.Errorf("request %d for the closed session answered %v, want lease-expired", id, got[id])
		}
	}
}

// A request's timeout and a cancel message end it as a deadline and a
// cancel end the unary RPC: a queued Acquire withdraws its wait. A stream
// that ends with an Acquire queued withdraws it too.
func TestLockStreamCancelAndTimeout(t *testing.T) {
	c := servertest.Start(t, servertest.Options{})
	a := newSession(t, c.Client, 60_000, "A").GetLeaseId()
	b := newSession(t, c.Client, 60_000, "B").GetLeaseId()
	acquire(t, c.Client, "ct", a)
	ls := openLockStream(t, c.Client)
	lsSend(t, ls, lsAcquire(1, "ct", b))
	waitQueued(t, c.Client, "ct", b)
	lsSend(t, ls, &pb.LockStreamRequest{Op: &pb.LockStreamRequest_Cancel{Cancel: 1}})
	if m := lsRecv(t, ls, 1)[1]; lsCode(m) != api.CodeCanceled {
		t.Fatalf("cancelled Acquire answered %v, want canceled", m)
	}
	waitQueued(t, c.Client, "ct")

	m := lsAcquire(2, "ct", b)
	m.TimeoutMs = 200
	lsSend(t, ls, m)
	if m := lsRecv(t, ls, 2)[2]; lsCode(m) != api.CodeDeadlineExceeded {
		t.Fatalf("Acquire past its timeout answered %v, want deadline-exceeded", m)
	}
	waitQueued(t, c.Client, "ct")

	// The stream goes away with an Acquire queued: it is withdrawn.
	lsSend(t, ls, lsAcquire(3, "ct", b))
	waitQueued(t, c.Client, "ct", b)
	mustOK(t, "close", ls.CloseResponse())
	waitQueued(t, c.Client, "ct")
}

// Each message is authorized as its unary RPC, and the caller is
// authenticated again when the auth state changes: a token revoked while
// its stream is open ends the stream with permission-denied.
func TestLockStreamAuthPerMessage(t *testing.T) {
	c, node := startAuth(t)
	ctx := ctxT(t)
	mk := func(who string) *pb.CreateTokenResponse {
		res, err := node.auth.CreateToken(ctx, req(&pb.CreateTokenRequest{Principal: who}))
		mustOK(t, "create token "+who, err)
		return res.Msg
	}
	opsTok, alice, eve := mk("ops"), mk("alice"), mk("eve")
	ops := withToken(t, c, opsTok.GetToken())
	for _, p := range []*pb.Policy{
		{Name: "alice", Principals: []string{"alice"}, Permissions: []string{"lock", "read"}, Prefixes: []string{"job:"}},
		{Name: "eve", Principals: []string{"eve"}, Permissions: []string{"lock", "read"}, Prefixes: []string{"job:"}},
	} {
		_, err := node.auth.SetPolicy(ctx, req(&pb.SetPolicyRequest{Policy: p}))
		mustOK(t, "set policy", err)
	}
	_, err := node.auth.SetEnabled(ctx, req(&pb.SetEnabledRequest{Enabled: true}))
	mustOK(t, "enable auth", err)
	rt := h2c()
	t.Cleanup(rt.CloseIdleConnections)
	ac, ec := as(c, rt, alice.GetToken()), as(c, rt, eve.GetToken())
	lease := newSession(t, ac, 60_000, "alice").GetLeaseId()

	als, els := openLockStream(t, ac), openLockStream(t, ec)
	lsSend(t, als, lsTry(1, "job:1", lease))
	lsSend(t, als, lsTry(2, "other:1", lease))
	got := lsRecv(t, als, 1, 2)
	if got[1].GetError() != nil {
		t.Fatalf("alice's TryAcquire of job:1 answered %v", got[1])
	}
	if lsCode(got[2]) != api.CodePermissionDenied {
		t.Fatalf("alice's TryAcquire outside her prefix answered %v, want permission-denied", got[2])
	}
	tok := got[1].GetTryAcquire().GetHolding().GetToken()
	lsSend(t, els, &pb.LockStreamRequest{Id: 1, Op: &pb.LockStreamRequest_Release{Release: &pb.ReleaseRequest{Name: "job:1", LeaseId: lease, Token: tok}}})
	if m := lsRecv(t, els, 1)[1]; lsCode(m) != api.CodePermissionDenied {
		t.Fatalf("eve releasing alice's lock answered %v, want permission-denied", m)
	}
	if status(t, ops.locks, "job:1").GetHolder().GetToken() != tok {
		t.Fatal("eve's refused release changed the holding")
	}

	// A session created on the stream belongs to the stream's caller.
	lsSend(t, als, lsCreate(4, 60_000, "alice"))
	streamLease := lsRecv(t, als, 4)[4].GetCreateSession().GetLeaseId()
	lsSend(t, els, lsKeepAlive(2, streamLease))
	lsSend(t, els, lsClose(3, streamLease))
	for id, m := range lsRecv(t, els, 2, 3) {
		if lsCode(m) != api.CodePermissionDenied {
			t.Fatalf("eve's request %d for alice's session answered %v, want permission-denied", id, m)
		}
	}
	lsSend(t, als, lsKeepAlive(5, streamLease))
	if m := lsRecv(t, als, 5)[5]; m.GetKeepAlive().GetLeaseId() != streamLease {
		t.Fatalf("alice renewing her session after eve's refused close: %v", m)
	}

	// Revoked: the stream ends (revoke_test.go), and a message sent on
	// it is not taken.
	_, err = ops.auth.RevokeToken(ctx, req(&pb.RevokeTokenRequest{Id: alice.GetId()}))
	mustOK(t, "revoke alice's token", err)
	_ = als.Send(lsTry(6, "job:2", lease))
	for {
		m, err := als.Receive()
		if err != nil {
			wantCode(t, "alice's stream after her token was revoked", err, api.CodePermissionDenied)
			break
		}
		if lsCode(m) != api.CodePermissionDenied { // taken before the stream ended
			t.Fatalf("a message after alice's token was revoked answered %v, want permission-denied", m)
		}
	}
	if status(t, ops.locks, "job:2").GetHolder() != nil {
		t.Fatal("the refused message acquired job:2")
	}
}

// A message may carry a batch of requests: each is taken as if it had come
// in a message of its own, answered on its own, and refused alone when bad.
// A batch the stream cannot take (a message with a batch and an id, a
// batch of more than api.StreamBatchMax, a batch in a batch) ends the
// stream with invalid-argument before any of its requests is taken.
func TestLockStreamBatch(t *testing.T) {
	c := servertest.Start(t, servertest.Options{})
	a := newSession(t, c.Client, 60_000, "A").GetLeaseId()
	ls := openLockStream(t, c.Client)
	lsSend(t, ls, &pb.LockStreamRequest{Batch: []*pb.LockStreamRequest{lsTry(1, "bt:x", a), lsTry(2, "bt:y", a), lsTry(3, "", a)}})
	got := lsRecv(t, ls, 1, 2, 3)
	x, y := got[1].GetTryAcquire().GetHolding(), got[2].GetTryAcquire().GetHolding()
	if x.GetName() != "bt:x" || y.GetName() != "bt:y" || x.GetLeaseId() != a || y.GetLeaseId() != a || x.GetToken() == y.GetToken() {
		t.Fatalf("a batch of two TryAcquires answered %v and %v", got[1], got[2])
	}
	if lsCode(got[3]) != api.CodeInvalidArgument {
		t.Errorf("a bad request in a batch answered %v, want invalid-argument", got[3])
	}
	if status(t, c.Client, "bt:x").GetHolder().GetToken() != x.GetToken() || status(t, c.Client, "bt:y").GetHolder().GetToken() != y.GetToken() {
		t.Fatal("the batch's grants are not the holders")
	}
	lsSend(t, ls, lsTry(5, "bt:v", a)) // the stream goes on
	if m := lsRecv(t, ls, 5)[5]; m.GetTryAcquire().GetHolding().GetName() != "bt:v" {
		t.Fatalf("a message after the batch answered %v", m)
	}

	tooMany := make([]*pb.LockStreamRequest, api.StreamBatchMax+1)
	for i := range tooMany {
		tooMany[i] = lsTry(uint64(i+1), fmt.Sprintf("bt:n%d", i), a)
	}
	for _, tc := range []struct {
		name string
		msg  *pb.LockStreamRequest
	}{
		{"a message with a batch and an id", &pb.LockStreamRequest{Id: 1, Batch: []*pb.LockStreamRequest{lsTry(2, "bt:n0", a)}}},
		{"a message with a batch and an op", &pb.LockStreamRequest{Batch: []*pb.LockStreamRequest{lsTry(2, "bt:n0", a)}, Op: lsTry(1, "bt:n1", a).Op}},
		{"a batch too long", &pb.LockStreamRequest{Batch: tooMany}},
		{"a batch in a batch", &pb.LockStreamRequest{Batch: []*pb.LockStreamRequest{lsTry(1, "bt:n0", a), {Batch: []*pb.LockStreamRequest{lsTry(2, "bt:n1", a)}}}}},
	} {
		ls := openLockStream(t, c.Client)
		lsSend(t, ls, tc.msg)
		m, err := ls.Receive()
		if err == nil {
			t.Fatalf("%s: answered %v, want the stream ended", tc.name, m)
		}
		wantCode(t, tc.name, err, api.CodeInvalidArgument)
		for _, name := range []string{"bt:n0", "bt:n1"} {
			if status(t, c.Client, name).GetHolder() != nil {
				t.Fatalf("%s: %s was acquired", tc.name, name)
			}
		}
	}
}

// Each message takes a token of the caller's request rate, as a unary
// request does, and a refusal names the limit.
func TestLockStreamRatePerMessage(t *testing.T) {
	c, _ := startManual(t, withLimits(func(l *admission.Limits) { l.Rate, l.Burst = 1, 6 }))
	rt := h2c()
	t.Cleanup(rt.CloseIdleConnections)
	a := as(c, rt, "a")
	lease := newSession(t, a, 60_000, "a").GetLeaseId() // 1 token
	ls := openLockStream(t, a)                          // 1 token
	for id := uint64(1); id <= 6; id++ {
		lsSend(t, ls, lsTry(id, "rate:"+string(rune('a'+id)), lease))
		m := lsRecv(t, ls, id)[id]
		switch {
		case id <= 4 && m.GetError() != nil:
			t.Fatalf("message %d answered %v, want it within the burst", id, m)
		case id > 4 && (lsCode(m) != api.CodeResourceExhausted || !strings.Contains(m.GetMessage(), "serve --limit rate=N")):
			t.Fatalf("message %d answered %v, want refused by the rate limit", id, m)
		}
	}
	if status(t, c.Client, "rate:f").GetHolder() != nil {
		t.Fatal("a message refused by the rate limit acquired")
	}
}

// Each message is counted in the RPC metrics and logged in the access log
// as its unary RPC.
func TestLockStreamCountedAndLogged(t *testing.T) {
	var buf lockedBuffer
	c := servertest.Start(t, servertest.Options{Configure: func(cfg *server.Config) {
		cfg.AccessLog = slog.New(slog.NewTextHandler(&buf, nil))
	}})
	lease := newSession(t, c.Client, 60_000, "A").GetLeaseId()
	before := scrape(t, c)
	ls := openLockStream(t, c.Client)
	lsSend(t, ls, lsTry(1, "cl:1", lease))
	lsSend(t, ls, lsTry(2, "cl:2", lease))
	lsSend(t, ls, lsTry(3, "", lease))
	lsRecv(t, ls, 1, 2, 3)
	mustOK(t, "close requests", ls.CloseRequest())
	if _, err := ls.Receive(); err == nil {
		t.Fatal("the stream answered more than asked")
	}
	if n := sampleOr(before, `leasehold_rpc_total{code="ok",method="TryAcquire"}`); n != "" {
		t.Fatalf("TryAcquire counted %s before any", n)
	}
	after := scrape(t, c)
	if got := sample(t, after, `leasehold_rpc_total{code="ok",method="TryAcquire"}`); got != "2" {
		t.Errorf("ok TryAcquires counted %s, want 2", got)
	}
	if got := sample(t, after, `leasehold_rpc_total{code="invalid-argument",method="TryAcquire"}`); got != "1" {
		t.Errorf("refused TryAcquires counted %s, want 1", got)
	}
	line := "method=STREAM path=/leasehold.v1.LeaseholdService/TryAcquire stream=/leasehold.v1.LeaseholdService/LockStream code="
	err := servertest.Eventually(10*time.Second, func() bool { return strings.Count(buf.String(), line) == 3 })
	if err != nil {
		t.Fatalf("access log has %d lines of stream TryAcquires, want 3:\n%s", strings.Count(buf.String(), line), buf.String())
	}
	for _, want := range []string{line + "ok", line + "invalid-argument"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("access log lacks %q", want)
		}
	}
}

// sampleOr is sample without failing: "" when the series is absent.
func sampleOr(metrics, series string) string {
	for line := range strings.Lines(metrics) {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// A server shutting down answers the Acquires queued on a stream as
// unavailable (not applied) instead of leaving them to a broken stream.
func TestLockStreamDrain(t *testing.T) {
	c := servertest.Start(t, servertest.Options{})
	a := newSession(t, c.Client, 60_000, "A").GetLeaseId()
	b := newSession(t, c.Client, 60_000, "B").GetLeaseId()
	acquire(t, c.Client, "dr", a)
	ls := openLockStream(t, c.Client)
	lsSend(t, ls, lsAcquire(1, "dr", b))
	waitQueued(t, c.Client, "dr", b)
	stopped := async(func() error { c.Stop(); return nil })
	if m := lsRecv(t, ls, 1)[1]; lsCode(m) != api.CodeUnavailable {
		t.Fatalf("queued Acquire at shutdown answered %v, want unavailable", m)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if m, err := ls.Receive(); err == nil {
		t.Fatalf("the stream of a stopped server answered %v", m)
	}
}
