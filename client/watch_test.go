package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/harness/simtest"
	"github.com/leasehold/leasehold/internal/server"
)

// collect ranges over events on a goroutine that ends with ctx, sending
// each event (and a final error) to the returned channel.
func collect(ctx context.Context, t *testing.T, events func(func(*client.Event, error) bool)) (<-chan *client.Event, <-chan error, <-chan struct{}) {
	out := make(chan *client.Event, 1024)
	errc := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev, err := range events {
			if err != nil {
				errc <- err
				return
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, errc, done
}

// nextEvent waits for the next event, failing on a watch error.
func nextEvent(t *testing.T, evs <-chan *client.Event, errc <-chan error, what string) *client.Event {
	t.Helper()
	select {
	case ev := <-evs:
		return ev
	case err := <-errc:
		t.Fatalf("%s: the watch failed: %v", what, err)
	case <-time.After(15 * time.Second):
		t.Fatalf("%s: no event within 15s", what)
	}
	return nil
}

// A watcher whose node stops goes on on another node: across N acquire and
// release cycles, half of them after the stop, it sees exactly the events
// a watcher of a node that never stopped sees, each once, in log order.
// (An election under load may make the log hold more than one grant of a
// name: a grant whose answer was lost is withdrawn and granted again; every
// node applies the same log, so the two watchers still agree.)
func TestWatchResumesAcrossNodeLoss(t *testing.T) {
	cl := simtest.Start(t, 3, simtest.Options{})
	leader := cl.Leader()
	victim := cl.Followers()[0]
	eps := []string{victim.Addr}
	for _, n := range cl.Nodes {
		if n != victim {
			eps = append(eps, n.Addr)
		}
	}
	watcher := dial(t, strings.Join(eps, ","), client.WithRetryTimeout(20*time.Second))
	reference := dial(t, leader.Addr, client.WithRetryTimeout(20*time.Second))
	writer := dial(t, leader.Addr+","+strings.Join(eps[1:], ","))
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	var streams [2]<-chan *client.Event
	var errcs [2]<-chan error
	for k, c := range []*client.Client{watcher, reference} {
		stream, err := c.Watch(ctx, "n:")
		if err != nil {
			t.Fatal(err)
		}
		evs, errc, done := collect(ctx, t, stream)
		defer func() { cancel(); <-done }()
		streams[k], errcs[k] = evs, errc
	}

	s := newSession(t, writer, client.WithTTL(30*time.Second))
	const n = 30
	for i := range n {
		if i == n/2 {
			victim.Stop()
		}
		l, err := s.Acquire(ctx, fmt.Sprintf("n:%02d", i))
		if err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
	}
	l, err := s.Acquire(ctx, "n:end")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Both watchers, up to the release of n:end.
	var got [2][]*client.Event
	for k := range streams {
		for {
			ev := nextEvent(t, streams[k], errcs[k], fmt.Sprintf("watcher %d, event %d", k, len(got[k])))
			got[k] = append(got[k], ev)
			if ev.GetName() == "n:end" && ev.GetType() == pb.EventType_EVENT_TYPE_RELEASED {
				break
			}
		}
	}
	describe := func(ev *client.Event) string {
		return fmt.Sprintf("%s %s token %d at index %d", ev.GetType(), ev.GetName(), ev.GetToken(), ev.GetIndex())
	}
	for i := range max(len(got[0]), len(got[1])) {
		var a, b string
		if i < len(got[0]) {
			a = describe(got[0][i])
		}
		if i < len(got[1]) {
			b = describe(got[1][i])
		}
		if a != b {
			t.Fatalf("event %d: the watcher that moved saw %q, the watcher of a node that never stopped %q: a gap or a duplicate", i, a, b)
		}
	}
	// The events are the cycles, in order: each name acquired and
	// released (more than once only after a lost answer), indexes rising.
	var last uint64
	next := 0 // the cycle the events are at
	for i, ev := range got[0] {
		if ev.GetIndex() <= last {
			t.Fatalf("event %d (%s) after index %d", i, describe(ev), last)
		}
		last = ev.GetIndex()
		want := "n:end"
		if next < n {
			want = fmt.Sprintf("n:%02d", next)
		}
		if ev.GetName() != want && next < n {
			next++ // the next cycle starts
			want = "n:end"
			if next < n {
				want = fmt.Sprintf("n:%02d", next)
			}
		}
		wantType := pb.EventType_EVENT_TYPE_ACQUIRED
		if i > 0 && got[0][i-1].GetName() == ev.GetName() && got[0][i-1].GetType() == pb.EventType_EVENT_TYPE_ACQUIRED {
			wantType = pb.EventType_EVENT_TYPE_RELEASED
		}
		if ev.GetName() != want || ev.GetType() != wantType {
			t.Fatalf("event %d: %s, want %s %s", i, describe(ev), wantType, want)
		}
	}
	if next != n {
		t.Fatalf("the events cover %d of %d cycles", next, n)
	}
}

// A watch whose connection is cut resumes on a new connection: the events
// after the cut arrive, and no error.
func TestWatchResumesAfterCut(t *testing.T) {
	ts := startServer(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	conns := make(chan net.Conn, 16)
	addr := forward(t, ts.Addr, func(wg *sync.WaitGroup, _ <-chan struct{}, cc, sc net.Conn) {
		conns <- cc
		wg.Go(func() { _, _ = io.Copy(sc, cc); sc.Close() })
		wg.Go(func() { _, _ = io.Copy(cc, sc); cc.Close() })
	})
	stream, err := dial(t, addr).Watch(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	evs, errc, done := collect(ctx, t, stream)
	defer func() { cancel(); <-done }()
	(<-conns).Close()
	s := newSession(t, dial(t, ts.Addr))
	l, err := s.Acquire(ctx, "cut:x")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []pb.EventType{pb.EventType_EVENT_TYPE_ACQUIRED, pb.EventType_EVENT_TYPE_RELEASED} {
		if ev := nextEvent(t, evs, errc, want.String()); ev.GetName() != "cut:x" || ev.GetType() != want {
			t.Fatalf("after the cut got %s %s, want %s cut:x", ev.GetType(), ev.GetName(), want)
		}
	}
}

// A watch from an index the server's history no longer holds fails with
// ErrCompacted; one from a held index replays from there.
func TestWatchFromIndexAndCompacted(t *testing.T) {
	ts := startServer(t, func(cfg *server.Config) { cfg.WatchHistory = 4 })
	c := dial(t, ts.Addr)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	s := newSession(t, c) // applied before the watch starts: its start index is above 0
	var progress []uint64
	stream, err := c.Watch(ctx, "h:", client.OnProgress(func(i uint64) { progress = append(progress, i) }))
	if err != nil {
		t.Fatal(err)
	}
	evs, errc, done := collect(ctx, t, stream)
	defer func() { cancel(); <-done }()
	var seen []*client.Event
	for i := range 4 {
		l, err := s.Acquire(ctx, fmt.Sprintf("h:%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		seen = append(seen, nextEvent(t, evs, errc, "live"), nextEvent(t, evs, errc, "live"))
	}
	_, err = c.Watch(ctx, "h:", client.FromIndex(seen[0].GetIndex()))
	if !errors.Is(err, client.ErrCompacted) {
		t.Fatalf("watch from evicted index %d: %v (code %s), want ErrCompacted", seen[0].GetIndex(), err, api.CodeOf(err))
	}
	from := seen[len(seen)-2].GetIndex()
	replay, err := c.Watch(ctx, "h:", client.FromIndex(from))
	if err != nil {
		t.Fatalf("watch from held index %d: %v", from, err)
	}
	var got []string
	for ev, err := range replay {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.GetType().String()+" "+ev.GetName())
		if len(got) == 2 {
			break
		}
	}
	if want := []string{"EVENT_TYPE_ACQUIRED h:3", "EVENT_TYPE_RELEASED h:3"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("replayed %v, want %v", got, want)
	}
	cancel()
	<-done
	if len(progress) == 0 || progress[0] == 0 {
		t.Fatalf("progress %v, want the start index first", progress)
	}
}

// A first Watch with no server listening fails at once, as every call does.
func TestWatchNoServerFailsAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := dial(t, addr, client.WithRetryTimeout(time.Minute))
	ctx, cancel := context.WithTimeout(testCtx(t), 20*time.Second)
	defer cancel()
	if _, err := c.Watch(ctx, ""); !errors.Is(err, client.ErrUnavailable) || ctx.Err() != nil {
		t.Fatalf("watch with no server: %v (ctx %v), want ErrUnavailable at once", err, ctx.Err())
	}
}
