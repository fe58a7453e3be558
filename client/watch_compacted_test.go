package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"testing"
	"time"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
	"github.com/leasehold/leasehold/internal/server"
)

// heldTokens is a model of which tokens hold which names.
type heldTokens map[string]map[uint64]bool

func (m heldTokens) load(locks []*client.LockInfo) {
	clear(m)
	for _, l := range locks {
		for _, h := range l.GetHolders() {
			if m[l.GetName()] == nil {
				m[l.GetName()] = map[uint64]bool{}
			}
			m[l.GetName()][h.GetToken()] = true
		}
	}
}

func (m heldTokens) apply(ev *client.Event) {
	switch ev.GetType() {
	case pb.EventType_EVENT_TYPE_ACQUIRED:
		if m[ev.GetName()] == nil {
			m[ev.GetName()] = map[uint64]bool{}
		}
		m[ev.GetName()][ev.GetToken()] = true
	case pb.EventType_EVENT_TYPE_RELEASED, pb.EventType_EVENT_TYPE_EXPIRED:
		delete(m[ev.GetName()], ev.GetToken())
		if len(m[ev.GetName()]) == 0 {
			delete(m, ev.GetName())
		}
	}
}

func (m heldTokens) String() string {
	s := ""
	for _, name := range slices.Sorted(maps.Keys(m)) {
		s += fmt.Sprintf("%s%v ", name, slices.Sorted(maps.Keys(m[name])))
	}
	return s
}

// A watch from an index the history no longer holds, with OnCompacted, is
// handed the prefix's state at an index and goes on with the events after
// it: the state plus the events equal the server's state later, with no
// event missing or applied twice.
func TestWatchCompactedResyncsWithState(t *testing.T) {
	ts := startServer(t, func(cfg *server.Config) { cfg.WatchHistory = 4 })
	c := dial(t, ts.Addr)
	ctx := testCtx(t)
	s := newSession(t, c)
	kept, err := s.Acquire(ctx, "r:kept")
	if err != nil {
		t.Fatal(err)
	}
	sem := make([]*client.Lock, 3) // one permit per session
	for i := range sem {
		if sem[i], err = newSession(t, c).Acquire(ctx, "r:sem", client.WithPermits(3)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 { // evicts index 1 and the grants above from the history
		l, err := s.Acquire(ctx, fmt.Sprintf("r:%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// Without OnCompacted, the watch fails as before.
	if _, err := c.Watch(ctx, "r:", client.FromIndex(1)); !errors.Is(err, client.ErrCompacted) {
		t.Fatalf("watch from evicted index 1: %v, want ErrCompacted", err)
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		states []*client.Compacted
		loaded string // the model right after the state was loaded
	)
	model := heldTokens{}
	stream, err := c.Watch(wctx, "r:", client.FromIndex(1), client.OnCompacted(func(st *client.Compacted) {
		states = append(states, st)
		model.load(st.GetLocks())
		loaded = model.String()
	}))
	if err != nil {
		t.Fatalf("watch from evicted index 1 with OnCompacted: %v", err)
	}
	wantState := fmt.Sprintf("r:kept[%d] r:sem[%d %d %d] ", kept.Token(), sem[0].Token(), sem[1].Token(), sem[2].Token())

	// Changes after the state arrive as events, each once, after its index.
	if err := kept.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sem[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	last, err := s.Acquire(ctx, "r:last")
	if err != nil {
		t.Fatal(err)
	}
	for ev, err := range stream {
		if err != nil {
			t.Fatal(err)
		}
		if len(states) != 1 {
			t.Fatalf("%d states handed over before the first event, want 1", len(states))
		}
		if loaded != wantState {
			t.Fatalf("state at index %d: %s, want %s", states[0].GetIndex(), loaded, wantState)
		}
		if at := states[0].GetIndex(); ev.GetIndex() <= at {
			t.Fatalf("event %s %s at index %d, not after the state's index %d", ev.GetType(), ev.GetName(), ev.GetIndex(), at)
		}
		model.apply(ev)
		if ev.GetName() == "r:last" && ev.GetType() == pb.EventType_EVENT_TYPE_ACQUIRED {
			break
		}
	}
	want := fmt.Sprintf("r:last[%d] r:sem[%d %d] ", last.Token(), sem[1].Token(), sem[2].Token())
	if got := model.String(); got != want {
		t.Fatalf("state plus events: %s, want %s", got, want)
	}
	locks, _, err := c.List(ctx, "r:")
	if err != nil {
		t.Fatal(err)
	}
	server := heldTokens{}
	server.load(locks)
	if server.String() != want {
		t.Fatalf("server state %s, want %s", server, want)
	}
}

// A watch whose node installs a snapshot (the entries in between are never
// applied there, so no event tells of them) is handed the state the
// snapshot brought, here a release no event announced, and goes on with the
// events after it.
func TestWatchResyncsAfterSnapshotInstall(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.Addr)
	ctx := testCtx(t)
	s := newSession(t, c)
	held, err := s.Acquire(ctx, "i:a")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	states := make(chan *client.Compacted, 4)
	stream, err := c.Watch(wctx, "i:", client.OnCompacted(func(st *client.Compacted) { states <- st }))
	if err != nil {
		t.Fatal(err)
	}
	evs, errc, done := collect(wctx, t, stream)
	defer func() { cancel(); <-done }()

	// Install a snapshot of today's state plus the release of i:a.
	r := ts.Server().Node().Raft()
	snap := r.Snapshot()
	if err := snap.Error(); err != nil {
		t.Fatal(err)
	}
	meta, rc, err := snap.Open()
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	m := fsm.New(fsm.DefaultLimits())
	if err := m.Restore(data); err != nil {
		t.Fatal(err)
	}
	res := m.Apply(meta.Index+1, &fsmpb.Command{Op: &fsmpb.Command_Release{Release: &fsmpb.Release{Name: "i:a", LeaseId: s.ID(), Token: held.Token()}}})
	if res.Err != nil {
		t.Fatalf("release on the copy: %v", res.Err)
	}
	if data, err = m.Snapshot(); err != nil {
		t.Fatal(err)
	}
	meta.Size = int64(len(data))
	if err := r.Restore(meta, bytes.NewReader(data), 5*time.Second); err != nil {
		t.Fatal(err)
	}

	var st *client.Compacted
	select {
	case st = <-states:
	case err := <-errc:
		t.Fatalf("the watch ended after the snapshot install: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("no state within 15s of the snapshot install")
	}
	if len(st.GetLocks()) != 0 || st.GetIndex() <= meta.Index {
		t.Fatalf("state %v, want no lock (i:a released by the snapshot) after index %d", st, meta.Index)
	}
	next, err := s.Acquire(ctx, "i:b")
	if err != nil {
		t.Fatal(err)
	}
	var ev *client.Event
	select {
	case ev = <-evs:
	case err := <-errc:
		t.Fatalf("after the state: %v", err)
	case st2 := <-states:
		t.Fatalf("a second state %v", st2)
	case <-time.After(15 * time.Second):
		t.Fatalf("no event within 15s after the state")
	}
	if ev.GetType() != pb.EventType_EVENT_TYPE_ACQUIRED || ev.GetName() != "i:b" || ev.GetToken() != next.Token() || ev.GetIndex() <= st.GetIndex() {
		t.Fatalf("after the state at index %d got %s %s token %d index %d, want ACQUIRED i:b token %d", st.GetIndex(), ev.GetType(), ev.GetName(), ev.GetToken(), ev.GetIndex(), next.Token())
	}
}
