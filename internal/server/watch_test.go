package server_test

import (
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/harness/servertest"
	"github.com/leasehold/leasehold/internal/server"
)

// cycle acquires and releases name under lease: two events.
func cycle(t *testing.T, c client, name, lease string) {
	t.Helper()
	h := acquire(t, c, name, lease)
	_, err := c.Release(ctxT(t), req(&pb.ReleaseRequest{Name: name, LeaseId: lease, Token: h.GetToken()}))
	mustOK(t, "Release "+name, err)
}

// recvEvent reads the next response of s, which must be an event.
func recvEvent(t *testing.T, what string, s *connect.ServerStreamForClient[pb.WatchResponse]) *pb.Event {
	t.Helper()
	if !s.Receive() {
		t.Fatalf("%s: the watch ended: %v", what, s.Err())
	}
	ev := s.Msg().GetEvent()
	if ev == nil {
		t.Fatalf("%s: got %v, want an event", what, s.Msg())
	}
	return ev
}

func eventKey(e *pb.Event) string {
	return fmt.Sprintf("%d %s %s %d", e.GetIndex(), e.GetType(), e.GetName(), e.GetToken())
}

// A watch from a log index replays every event from that index out of the
// history, then goes on live: no gap, no duplicate.
func TestWatchFromIndexReplaysThenLive(t *testing.T) {
	t.Parallel()
	c, _ := startManual(t, servertest.Options{})
	cl := c.Client
	ctx := ctxT(t)
	live, err := cl.Watch(ctx, req(&pb.WatchRequest{Prefix: "r:"}))
	mustOK(t, "Watch", err)
	defer live.Close()
	live.ResponseHeader()
	a := newSession(t, cl, 3_600_000, "A")
	for i := range 5 {
		cycle(t, cl, fmt.Sprintf("r:%d", i), a.GetLeaseId())
		acquire(t, cl, fmt.Sprintf("other:%d", i), a.GetLeaseId())
	}
	var all []*pb.Event
	for i := range 10 {
		all = append(all, recvEvent(t, fmt.Sprintf("live event %d", i), live))
	}

	from := all[3].GetIndex()
	replay, err := cl.Watch(ctx, req(&pb.WatchRequest{Prefix: "r:", FromIndex: from}))
	mustOK(t, "Watch from_index", err)
	defer replay.Close()
	for i, want := range all[3:] {
		if got := recvEvent(t, fmt.Sprintf("replayed event %d", i), replay); eventKey(got) != eventKey(want) {
			t.Fatalf("replayed event %d: %s, want %s", i, eventKey(got), eventKey(want))
		}
	}
	cycle(t, cl, "r:last", a.GetLeaseId())
	for _, typ := range []pb.EventType{pb.EventType_EVENT_TYPE_ACQUIRED, pb.EventType_EVENT_TYPE_RELEASED} {
		want := recvEvent(t, "live r:last", live)
		got := recvEvent(t, "resumed r:last", replay)
		if want.GetType() != typ || want.GetName() != "r:last" || eventKey(got) != eventKey(want) {
			t.Fatalf("after the replay: %s, want %s (%s r:last)", eventKey(got), eventKey(want), typ)
		}
	}
}

// A watch from an index the bounded history no longer holds ends with
// compacted after one response with the current state at an index; one from
// an index it holds does not.
func TestWatchFromEvictedIndexIsCompacted(t *testing.T) {
	t.Parallel()
	c, _ := startManual(t, servertest.Options{Configure: func(cfg *server.Config) { cfg.WatchHistory = 4 }})
	cl := c.Client
	ctx := ctxT(t)
	live, err := cl.Watch(ctx, req(&pb.WatchRequest{}))
	mustOK(t, "Watch", err)
	defer live.Close()
	live.ResponseHeader()
	a := newSession(t, cl, 3_600_000, "A")
	var evs []*pb.Event
	for i := range 5 {
		cycle(t, cl, fmt.Sprintf("c:%d", i), a.GetLeaseId())
		evs = append(evs, recvEvent(t, "live", live), recvEvent(t, "live", live))
	}
	acquire(t, cl, "c:held", a.GetLeaseId()) // evicts evs[6]
	old, err := cl.Watch(ctx, req(&pb.WatchRequest{FromIndex: evs[0].GetIndex()}))
	mustOK(t, "Watch from an evicted index", err)
	defer old.Close()
	if !old.Receive() {
		t.Fatalf("a watch from evicted index %d ended without the state: %v", evs[0].GetIndex(), old.Err())
	}
	st := old.Msg().GetCompacted()
	if st == nil || st.GetIndex() <= evs[len(evs)-1].GetIndex() || len(st.GetLocks()) != 1 || st.GetLocks()[0].GetHolder().GetName() != "c:held" {
		t.Fatalf("a watch from evicted index %d got %v, want the state after index %d: c:held", evs[0].GetIndex(), old.Msg(), evs[len(evs)-1].GetIndex())
	}
	if old.Receive() {
		t.Fatalf("after the state got %v, want the end", old.Msg())
	}
	wantCode(t, "a watch from an evicted index", old.Err(), api.CodeCompacted)

	held, err := cl.Watch(ctx, req(&pb.WatchRequest{FromIndex: evs[7].GetIndex()}))
	mustOK(t, "Watch from a held index", err)
	defer held.Close()
	for _, want := range evs[7:] {
		if got := recvEvent(t, "replayed", held); eventKey(got) != eventKey(want) {
			t.Fatalf("replayed %s, want %s", eventKey(got), eventKey(want))
		}
	}
}

// A watch that asks for progress gets the applied index when it is
// registered and again whenever it was idle for the progress interval: a
// caller knows how far it has seen with no event to tell it.
func TestWatchProgressOnIdleStream(t *testing.T) {
	t.Parallel()
	c, _ := startManual(t, servertest.Options{Configure: func(cfg *server.Config) { cfg.WatchProgressInterval = 10 * time.Millisecond }})
	cl := c.Client
	a := newSession(t, cl, 3_600_000, "A")
	acquire(t, cl, "p:before", a.GetLeaseId())
	s, err := cl.Watch(ctxT(t), req(&pb.WatchRequest{Prefix: "p:", ProgressNotify: true}))
	mustOK(t, "Watch", err)
	defer s.Close()
	if !s.Receive() || s.Msg().GetEvent() != nil {
		t.Fatalf("first response %v (%v), want progress", s.Msg(), s.Err())
	}
	first := s.Msg().GetAppliedIndex()
	if first == 0 {
		t.Fatal("the first progress response carries no applied index")
	}
	// Another prefix's event moves the applied index but is not sent.
	acquire(t, cl, "unwatched", a.GetLeaseId())
	h := acquire(t, cl, "p:after", a.GetLeaseId())
	var ev *pb.Event
	for ev == nil {
		if !s.Receive() {
			t.Fatalf("watch ended: %v", s.Err())
		}
		ev = s.Msg().GetEvent()
	}
	if ev.GetName() != "p:after" || ev.GetToken() != h.GetToken() || ev.GetIndex() <= first {
		t.Fatalf("event %v after progress %d, want p:after token %d", ev, first, h.GetToken())
	}
	// Idle now: the next response is progress covering the event.
	if !s.Receive() {
		t.Fatalf("watch ended: %v", s.Err())
	}
	if m := s.Msg(); m.GetEvent() != nil || m.GetAppliedIndex() < ev.GetIndex() {
		t.Fatalf("on an idle stream got %v, want progress ≥ %d", m, ev.GetIndex())
	}
}
