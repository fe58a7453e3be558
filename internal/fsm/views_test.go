package fsm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestReadViews covers the read-only accessors the server uses.
func TestReadViews(t *testing.T) {
	r := newRig(t, DefaultLimits())
	r.must(append(sessions("A", "B"), acquire("app:1", "A"), acquire("app:2", "B"), acquire("app:1", "B"), acquire("other", "A"))...)
	list, more := r.m.List("app:", 1)
	if len(list) != 1 || !more || list[0].Name != "app:1" || list[0].Owner != "worker-A" || len(list[0].Waiters) != 1 {
		t.Fatalf("List(app:, 1) = %+v, %v", list, more)
	}
	list, more = r.m.List("app:", 10)
	if len(list) != 2 || more || list[1].Name != "app:2" {
		t.Fatalf("List(app:, 10) = %+v, %v", list, more)
	}
	if len(r.m.Sessions()) != 2 || r.m.Owner("B") != "worker-B" || r.m.Owner("C") != "" || r.m.Session("C") != nil {
		t.Fatalf("sessions %v", r.m.Sessions())
	}
	if page, more := r.m.SessionPage(1); len(page) != 1 || !more || page[0].GetLeaseId() != "A" {
		t.Fatalf("SessionPage(1) = %v, %v; want A and more", page, more)
	}
	if page, more := r.m.SessionPage(10); len(page) != 2 || more || page[1].GetLeaseId() != "B" {
		t.Fatalf("SessionPage(10) = %v, %v; want A, B", page, more)
	}
	if r.m.SessionCount() != 2 || r.m.LockCount() != 3 {
		t.Fatalf("SessionCount %d, LockCount %d; want 2 and 3", r.m.SessionCount(), r.m.LockCount())
	}
	if li := r.m.Lock("free"); li.Name != "free" || li.Holder != nil {
		t.Fatalf("Lock(free) = %+v", li)
	}
}

// TestListPages checks List against sorting every name: for each prefix and
// each limit (none, one, fewer than match, exactly as many, more) it returns
// the first names in order, each described, and says whether more matched.
func TestListPages(t *testing.T) {
	r := newRig(t, DefaultLimits())
	r.must(sessions("A")...)
	rng := rand.New(rand.NewPCG(1, 2))
	var names []string
	for len(names) < 400 {
		name := fmt.Sprintf("%s/%04d", []string{"app", "ap", "db", ""}[rng.IntN(4)], rng.IntN(10_000))
		if !slices.Contains(names, name) {
			names = append(names, name)
			r.must(acquire(name, "A"))
		}
	}
	slices.Sort(names)
	for _, prefix := range []string{"", "ap", "app/", "db/", "db/9", "none"} {
		var match []string
		for _, n := range names {
			if strings.HasPrefix(n, prefix) {
				match = append(match, n)
			}
		}
		for _, limit := range []int{0, 1, 7, len(match) - 1, len(match), len(match) + 1, math.MaxInt} {
			if limit < 0 {
				continue
			}
			list, more := r.m.List(prefix, limit)
			want := match[:min(limit, len(match))]
			got := make([]string, len(list))
			for i, l := range list {
				got[i] = l.Name
				if l.Holder.GetLeaseId() != "A" || l.Owner != "worker-A" {
					t.Fatalf("List(%q, %d)[%d] = %+v, want held by A", prefix, limit, i, l)
				}
			}
			if !slices.Equal(got, want) || more != (len(match) > limit) {
				t.Fatalf("List(%q, %d) = %v, more %v; want %v, more %v", prefix, limit, got, more, want, len(match) > limit)
			}
		}
	}
}

// TestCensus counts what /metrics reports (sessions, held locks, queued
// waiters, lock-delays) and copies nothing: a scrape reads it under the
// state's read lock, which every apply waits for.
func TestCensus(t *testing.T) {
	r := newRig(t, DefaultLimits())
	r.must(append(sessions("A", "B", "C", "D", "E"),
		acquire("x", "A", shared()), acquire("x", "B", shared()), acquire("x", "C"), // two holders, a waiter
		acquire("y", "A"), acquire("y", "B"), acquire("y", "D"), // a holder, two waiters
		acquire("z", "E", delay(5_000)), expire("E"))...) // in a lock-delay
	want := Census{Sessions: 4, Held: 2, Waiters: 3, Delayed: 1}
	if got := r.m.Census(); got != want {
		t.Fatalf("Census() = %+v, want %+v", got, want)
	}
	if allocs := testing.AllocsPerRun(10, func() { r.m.Census() }); allocs != 0 {
		t.Fatalf("Census allocates %v times, want none", allocs)
	}
	r.must(release("x", "A", 1), closeSession("B"), closeSession("D"))
	want = Census{Sessions: 2, Held: 2, Waiters: 0, Delayed: 1} // C now holds x
	if got := r.m.Census(); got != want {
		t.Fatalf("after releases: Census() = %+v, want %+v", got, want)
	}
}

// Standing reads one session's place at a lock (holding, queued wait, queue
// length) as Lock would, without copying the queue: a waiter reads it on
// every wake-up, under the state's read lock, at any queue length.
func TestStanding(t *testing.T) {
	r := newRig(t, DefaultLimits())
	ids := []string{"h"}
	for i := range 64 {
		ids = append(ids, fmt.Sprintf("w%02d", i))
	}
	for _, c := range sessions(ids...) {
		r.apply(c)
	}
	r.apply(acquire("a", "h", waitID(7)))
	for i, id := range ids[1:] {
		r.apply(acquire("a", id, waitID(uint64(100+i))))
	}
	m := r.m

	h, waiting, n := m.Standing("a", "h", 7)
	if h == nil || h.GetLeaseId() != "h" || h.GetToken() != m.Lock("a").Holder.GetToken() || waiting || n != 64 {
		t.Fatalf("holder: Standing = %v, %v, %d; want its holding, not waiting, 64 queued", h, waiting, n)
	}
	h.Token = 0 // a copy: the state keeps its token
	if m.Lock("a").Holder.GetToken() == 0 {
		t.Fatal("Standing returned the state's own holding, not a copy")
	}
	if h, waiting, n := m.Standing("a", "w63", 163); h != nil || !waiting || n != 64 {
		t.Fatalf("last waiter: Standing = %v, %v, %d; want no holding, waiting, 64", h, waiting, n)
	}
	if _, waiting, _ := m.Standing("a", "w63", 999); waiting {
		t.Fatal("a wait id the session is not queued with reads as waiting")
	}
	if h, waiting, n := m.Standing("free", "h", 7); h != nil || waiting || n != 0 {
		t.Fatalf("free name: Standing = %v, %v, %d", h, waiting, n)
	}
	// Lock copies the 64 waiters; Standing copies at most the one holding.
	if a := testing.AllocsPerRun(50, func() { m.Standing("a", "w63", 163) }); a != 0 {
		t.Fatalf("a waiter's Standing allocates %.0f times with 64 queued; want 0", a)
	}
}

// Head names a lock's holders as Lock does and counts its queue without
// copying it: a refused TryAcquire reads it, whatever the queue's length.
func TestHead(t *testing.T) {
	r := newRig(t, DefaultLimits())
	ids := []string{"h"}
	for i := range 300 {
		ids = append(ids, fmt.Sprintf("w%03d", i))
	}
	r.must(sessions(ids...)...)
	r.must(acquire("short", "h"), acquire("short", "w000"), acquire("long", "h"))
	for _, id := range ids[1:] {
		r.must(acquire("long", id))
	}
	info, n := r.m.Head("long")
	full := r.m.Lock("long")
	if info.Holder.GetToken() != full.Holder.GetToken() || info.Owner != "worker-h" || len(info.Holders) != 1 || info.Waiters != nil || n != 300 {
		t.Fatalf("Head(long) = %+v, %d; want h's holding, no waiters copied, 300 queued", info, n)
	}
	info.Holder.Token = 0 // a copy: the state keeps its token
	if r.m.Lock("long").Holder.GetToken() == 0 {
		t.Fatal("Head returned the state's own holding, not a copy")
	}
	if info, n := r.m.Head("free"); info.Holder != nil || n != 0 || info.Permits != 1 {
		t.Fatalf("Head(free) = %+v, %d", info, n)
	}
	short := testing.AllocsPerRun(20, func() { r.m.Head("short") })
	long := testing.AllocsPerRun(20, func() { r.m.Head("long") })
	if long != short {
		t.Fatalf("Head allocates %.0f times with 300 queued, %.0f with 1; want the same", long, short)
	}
}
