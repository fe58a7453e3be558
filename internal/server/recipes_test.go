package server_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// holdersOf lists a lock's holders as "owner:slot", in grant order.
func holdersOf(info *pb.LockInfo) []string {
	var out []string
	for _, h := range info.GetHolders() {
		out = append(out, fmt.Sprintf("%s:%d", h.GetOwner(), h.GetSlot()))
	}
	return out
}

func wantHoldersRPC(t *testing.T, info *pb.LockInfo, want ...string) {
	t.Helper()
	if got := holdersOf(info); !slices.Equal(got, want) {
		t.Fatalf("holders of %s = %q, want %q", info.GetName(), got, want)
	}
}

// TestReadWriteLock: readers share a name, a writer waits for all of them
// and gets a token above every reader's, a reader that came after the
// writer waits for it (no writer starvation), and status shows every holder.
func TestReadWriteLock(t *testing.T) {
	t.Parallel()
	c, _ := startManual(t, servertest.Options{})
	cl := c.Client
	shared := pb.LockMode_LOCK_MODE_SHARED
	r1, r2, w, r3 := newSession(t, cl, 60_000, "R1"), newSession(t, cl, 60_000, "R2"), newSession(t, cl, 60_000, "W"), newSession(t, cl, 60_000, "R3")
	var readers []*pb.Holding
	for _, s := range []*pb.CreateSessionResponse{r1, r2} {
		resp, err := cl.Acquire(ctxT(t), req(&pb.AcquireRequest{Name: "rw", LeaseId: s.GetLeaseId(), Mode: shared}))
		mustOK(t, "read lock", err)
		readers = append(readers, resp.Msg.GetHolding())
	}
	chW := acquireAsync(ctxT(t), cl, &pb.AcquireRequest{Name: "rw", LeaseId: w.GetLeaseId()})
	waitQueued(t, cl, "rw", w.GetLeaseId())
	chR3 := acquireAsync(ctxT(t), cl, &pb.AcquireRequest{Name: "rw", LeaseId: r3.GetLeaseId(), Mode: shared})
	waitQueued(t, cl, "rw", w.GetLeaseId(), r3.GetLeaseId())
	info := status(t, cl, "rw")
	wantHoldersRPC(t, info, "R1:0", "R2:0")
	if info.GetHolder().GetOwner() != "R1" || info.GetPermits() != 1 || info.GetHolders()[1].GetMode() != shared {
		t.Fatalf("status %v", info)
	}
	_, err := cl.TryAcquire(ctxT(t), req(&pb.TryAcquireRequest{Name: "rw", LeaseId: r3.GetLeaseId(), Mode: shared}))
	wantCode(t, "try read behind a queued writer", err, api.CodeLocked)

	for _, h := range readers {
		_, err := cl.Release(ctxT(t), req(&pb.ReleaseRequest{Name: "rw", LeaseId: h.GetLeaseId(), Token: h.GetToken()}))
		mustOK(t, "release reader", err)
	}
	gotW := recv(t, "writer", chW)
	mustOK(t, "writer", gotW.err)
	for _, h := range readers {
		if gotW.resp.GetHolding().GetToken() <= h.GetToken() {
			t.Fatalf("writer token %d not above reader token %d", gotW.resp.GetHolding().GetToken(), h.GetToken())
		}
	}
	if !pending(chR3) {
		t.Fatal("a reader was granted beside the writer")
	}
	hw := gotW.resp.GetHolding()
	_, err = cl.Release(ctxT(t), req(&pb.ReleaseRequest{Name: "rw", LeaseId: hw.GetLeaseId(), Token: hw.GetToken()}))
	mustOK(t, "release writer", err)
	gotR3 := recv(t, "late reader", chR3)
	mustOK(t, "late reader", gotR3.err)
	if gotR3.resp.GetHolding().GetToken() <= hw.GetToken() || gotR3.resp.GetHolding().GetMode() != shared {
		t.Fatalf("late reader %v after writer token %d", gotR3.resp.GetHolding(), hw.GetToken())
	}
}

// TestSemaphore: N permits, each holder in its own slot with its own token;
// the N+1st waits; a request with other permits is refused with the name's
// permits in the message; an expired holder's slot passes to the queue.
func TestSemaphore(t *testing.T) {
	t.Parallel()
	c, _ := startManual(t, servertest.Options{})
	cl := c.Client
	a, b, x := newSession(t, cl, 1000, "A"), newSession(t, cl, 60_000, "B"), newSession(t, cl, 60_000, "X")
	for _, s := range []*pb.CreateSessionResponse{a, b} {
		_, err := cl.Acquire(ctxT(t), req(&pb.AcquireRequest{Name: "sem", LeaseId: s.GetLeaseId(), Permits: 2}))
		mustOK(t, "permit", err)
	}
	wantHoldersRPC(t, status(t, cl, "sem"), "A:0", "B:1")
	_, err := cl.TryAcquire(ctxT(t), req(&pb.TryAcquireRequest{Name: "sem", LeaseId: x.GetLeaseId(), Permits: 3}))
	wantCode(t, "other permits", err, api.CodeInvalidArgument)
	if !strings.Contains(err.Error(), "has 2 permits") {
		t.Fatalf("refusal %q does not name the current permits", err)
	}
	_, err = cl.TryAcquire(ctxT(t), req(&pb.TryAcquireRequest{Name: "sem", LeaseId: x.GetLeaseId(), Permits: 2}))
	wantCode(t, "third of two permits", err, api.CodeLocked)
	ch := acquireAsync(ctxT(t), cl, &pb.AcquireRequest{Name: "sem", LeaseId: x.GetLeaseId(), Permits: 2})
	waitQueued(t, cl, "sem", x.GetLeaseId())
	c.AdvanceUntil("A to expire", func() bool { return !pending(ch) })
	got := recv(t, "X", ch)
	mustOK(t, "X", got.err)
	if h := got.resp.GetHolding(); h.GetSlot() != 0 || h.GetOwner() != "X" {
		t.Fatalf("X got %v, want slot 0", h)
	}
	wantHoldersRPC(t, status(t, cl, "sem"), "B:1", "X:0")
}

// TestProclaim: the holder changes its holding's value, which status and
// watch show; a stale token is refused with not-holder.
func TestProclaim(t *testing.T) {
	t.Parallel()
	c, _ := startManual(t, servertest.Options{})
	cl := c.Client
	a := newSession(t, cl, 60_000, "A")
	resp, err := cl.Acquire(ctxT(t), req(&pb.AcquireRequest{Name: "leader", LeaseId: a.GetLeaseId(), Value: []byte("a:1")}))
	mustOK(t, "campaign", err)
	h := resp.Msg.GetHolding()
	if string(h.GetValue()) != "a:1" {
		t.Fatalf("holding value %q", h.GetValue())
	}
	_, err = cl.Proclaim(ctxT(t), req(&pb.ProclaimRequest{Name: "leader", LeaseId: a.GetLeaseId(), Token: h.GetToken(), Value: []byte("a:2")}))
	mustOK(t, "proclaim", err)
	if v := string(status(t, cl, "leader").GetHolder().GetValue()); v != "a:2" {
		t.Fatalf("value after proclaim %q", v)
	}
	_, err = cl.Proclaim(ctxT(t), req(&pb.ProclaimRequest{Name: "leader", LeaseId: a.GetLeaseId(), Token: h.GetToken() + 1, Value: []byte("x")}))
	wantCode(t, "proclaim with another token", err, api.CodeNotHolder)
	_, err = cl.Proclaim(ctxT(t), req(&pb.ProclaimRequest{Name: "leader", LeaseId: a.GetLeaseId(), Token: h.GetToken(), Value: make([]byte, 5000)}))
	wantCode(t, "proclaim too large", err, api.CodeInvalidArgument)
}

// TestListSessions lists every live session with what it holds or waits for.
func TestListSessions(t *testing.T) {
	t.Parallel()
	c, _ := startManual(t, servertest.Options{})
	cl := c.Client
	a, b := newSession(t, cl, 60_000, "A"), newSession(t, cl, 30_000, "B")
	acquire(t, cl, "ls:1", a.GetLeaseId())
	resp, err := cl.ListSessions(ctxT(t), req(&pb.ListSessionsRequest{}))
	mustOK(t, "ListSessions", err)
	byID := map[string]*pb.SessionInfo{}
	for _, s := range resp.Msg.GetSessions() {
		byID[s.GetLeaseId()] = s
	}
	if s := byID[a.GetLeaseId()]; s.GetOwner() != "A" || !slices.Equal(s.GetNames(), []string{"ls:1"}) || s.GetRemainingMs() <= 0 || s.GetTtlMs() != 60_000 {
		t.Fatalf("session A listed as %v", s)
	}
	if s := byID[b.GetLeaseId()]; s.GetOwner() != "B" || len(s.GetNames()) != 0 {
		t.Fatalf("session B listed as %v", s)
	}
	resp, err = cl.ListSessions(ctxT(t), req(&pb.ListSessionsRequest{Limit: 1}))
	mustOK(t, "ListSessions limit 1", err)
	if len(resp.Msg.GetSessions()) != 1 || !resp.Msg.GetTruncated() {
		t.Fatalf("limit 1: %v", resp.Msg)
	}
}

// TestElectionFailover: under a manual clock, the leader's session expires
// and the queued candidate is elected with a larger epoch and its own
// value; watch reports both elections and the proclamation with values.
func TestElectionFailover(t *testing.T) {
	t.Parallel()
	c, _ := startManual(t, servertest.Options{})
	cl := c.Client
	stream, err := cl.Watch(ctxT(t), req(&pb.WatchRequest{Prefix: "leader"}))
	mustOK(t, "watch", err)
	defer stream.Close()
	a, b := newSession(t, cl, 1000, "A"), newSession(t, cl, 60_000, "B")
	resp, err := cl.Acquire(ctxT(t), req(&pb.AcquireRequest{Name: "leader", LeaseId: a.GetLeaseId(), Value: []byte("a")}))
	mustOK(t, "campaign a", err)
	ha := resp.Msg.GetHolding()
	_, err = cl.Proclaim(ctxT(t), req(&pb.ProclaimRequest{Name: "leader", LeaseId: a.GetLeaseId(), Token: ha.GetToken(), Value: []byte("a2")}))
	mustOK(t, "proclaim", err)
	ch := acquireAsync(ctxT(t), cl, &pb.AcquireRequest{Name: "leader", LeaseId: b.GetLeaseId(), Value: []byte("b")})
	waitQueued(t, cl, "leader", b.GetLeaseId())
	c.AdvanceUntil("a's session to expire", func() bool { return !pending(ch) })
	got := recv(t, "b", ch)
	mustOK(t, "campaign b", got.err)
	if h := got.resp.GetHolding(); h.GetToken() <= ha.GetToken() || string(h.GetValue()) != "b" {
		t.Fatalf("b elected with %v; want a larger epoch than %d and value b", h, ha.GetToken())
	}
	var seen []string
	for len(seen) < 3 && stream.Receive() {
		ev := stream.Msg().GetEvent()
		switch ev.GetType() {
		case pb.EventType_EVENT_TYPE_ACQUIRED, pb.EventType_EVENT_TYPE_PROCLAIMED:
			seen = append(seen, fmt.Sprintf("%s:%s", strings.TrimPrefix(ev.GetType().String(), "EVENT_TYPE_"), ev.GetValue()))
		}
	}
	if want := []string{"ACQUIRED:a", "PROCLAIMED:a2", "ACQUIRED:b"}; !slices.Equal(seen, want) {
		t.Fatalf("watch saw %q, want %q", seen, want)
	}
}

// TestModesNeverMix: a session that reads a name cannot pass for its
// writer, nor a lock holder for an election's leader. The request is
// refused with invalid-argument, names what the session holds, and changes
// nothing: the other reader still reads, and the name's tokens stand.
func TestModesNeverMix(t *testing.T) {
	t.Parallel()
	c, _ := startManual(t, servertest.Options{})
	cl := c.Client
	shared := pb.LockMode_LOCK_MODE_SHARED
	a, b := newSession(t, cl, 60_000, "A"), newSession(t, cl, 60_000, "B")
	for _, s := range []*pb.CreateSessionResponse{a, b} {
		_, err := cl.Acquire(ctxT(t), req(&pb.AcquireRequest{Name: "rw", LeaseId: s.GetLeaseId(), Mode: shared}))
		mustOK(t, "read lock", err)
	}
	_, err := cl.Acquire(ctxT(t), req(&pb.AcquireRequest{Name: "rw", LeaseId: a.GetLeaseId(), WaitId: 9}))
	wantCode(t, "a reader's write lock", err, api.CodeInvalidArgument)
	if !strings.Contains(err.Error(), `"rw" is already held shared by this session, the request asked for it exclusive; release it first`) {
		t.Fatalf("refusal %q does not say what the session holds", err)
	}
	_, err = cl.TryAcquire(ctxT(t), req(&pb.TryAcquireRequest{Name: "rw", LeaseId: a.GetLeaseId()}))
	wantCode(t, "a reader's try for the write lock", err, api.CodeInvalidArgument)
	info := status(t, cl, "rw")
	wantHoldersRPC(t, info, "A:0", "B:0")
	for _, h := range info.GetHolders() {
		if h.GetMode() != shared {
			t.Fatalf("a holder of rw changed mode: %v", h)
		}
	}

	// An election: the leader's campaign with another value, or a plain
	// acquire of the election, is refused; the same value repeats.
	_, err = cl.Acquire(ctxT(t), req(&pb.AcquireRequest{Name: "e", LeaseId: a.GetLeaseId(), Value: []byte("a")}))
	mustOK(t, "campaign", err)
	_, err = cl.Acquire(ctxT(t), req(&pb.AcquireRequest{Name: "e", LeaseId: a.GetLeaseId(), Value: []byte("b")}))
	wantCode(t, "campaign with another value", err, api.CodeInvalidArgument)
	_, err = cl.Acquire(ctxT(t), req(&pb.AcquireRequest{Name: "rw", LeaseId: b.GetLeaseId(), Value: []byte("b")}))
	wantCode(t, "a reader's campaign", err, api.CodeInvalidArgument)
	resp, err := cl.Acquire(ctxT(t), req(&pb.AcquireRequest{Name: "e", LeaseId: a.GetLeaseId(), Value: []byte("a")}))
	mustOK(t, "the same campaign again", err)
	if h := resp.Msg.GetHolding(); string(h.GetValue()) != "a" || h.GetToken() != 3 {
		t.Fatalf("repeated campaign = %v, want the leadership of token 3", h)
	}
}
