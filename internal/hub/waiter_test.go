package hub

import (
	"testing"

	"github.com/leasehold/leasehold/internal/fsm"
)

func waiterWoken(w *Waiter) bool {
	select {
	case <-w.Wake():
		return true
	default:
		return false
	}
}

// A queued request's waiter is woken by events of its own name and lease
// only, by a newer request of the same session and name (which replaced
// it in the queue), and by a snapshot install; an unregistered one is not
// woken at all.
func TestHubWakesWaitersOfTheirNameAndLease(t *testing.T) {
	h := New(8)
	a := h.Wait("n", "L1")
	b := h.Wait("n", "L2")
	other := h.Wait("m", "L1")
	if waiterWoken(a) || waiterWoken(b) || waiterWoken(other) {
		t.Fatal("a waiter of another lease or name woke on registration")
	}
	h.Publish(1, []fsm.Event{{Name: "n", LeaseID: "L2", Index: 1}})
	if !waiterWoken(b) {
		t.Fatal("the waiter of (n, L2) was not woken by its event")
	}
	if waiterWoken(a) || waiterWoken(other) {
		t.Fatal("an event of (n, L2) woke the waiter of another lease or name")
	}
	h.Publish(2, []fsm.Event{{Name: "n", LeaseID: "L1", Index: 2}, {Name: "n", LeaseID: "L1", Index: 2}})
	if !waiterWoken(a) || waiterWoken(a) {
		t.Fatal("two events of (n, L1) in one entry: want one coalesced wake-up")
	}
	newer := h.Wait("n", "L1")
	if !waiterWoken(a) {
		t.Fatal("a request replaced by a newer one of the same session and name was not woken")
	}
	if waiterWoken(newer) || waiterWoken(b) || waiterWoken(other) {
		t.Fatal("registering a waiter woke itself or waiters of other keys")
	}
	h.Restored(0)
	for i, w := range []*Waiter{a, b, other, newer} {
		if !waiterWoken(w) {
			t.Fatalf("waiter %d was not woken by the snapshot install", i)
		}
	}
	h.Unwait(a)
	h.Unwait(newer)
	h.Publish(3, []fsm.Event{{Name: "n", LeaseID: "L1", Index: 3}})
	if waiterWoken(a) || waiterWoken(newer) {
		t.Fatal("an unregistered waiter was woken")
	}
	if n := len(h.waiters); n != 2 {
		t.Fatalf("%d waiter keys registered, want 2 (the empty one dropped)", n)
	}
}

// Watchers counts open watchers: registered ones, less those unregistered
// or ended by the hub.
func TestHubWatchers(t *testing.T) {
	h := New(8)
	w1, _, err := h.Watch("a/", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.Watch("b/", 0); err != nil {
		t.Fatal(err)
	}
	if n := h.Watchers(); n != 2 {
		t.Fatalf("Watchers() = %d, want 2", n)
	}
	h.Unwatch(w1)
	if n := h.Watchers(); n != 1 {
		t.Fatalf("Watchers() after Unwatch = %d, want 1", n)
	}
	h.Restored(0)
	if n := h.Watchers(); n != 0 {
		t.Fatalf("Watchers() after a snapshot install = %d, want 0", n)
	}
	if w1.Err() != nil {
		t.Fatalf("Err() of a watcher unregistered by its stream = %v, want nil", w1.Err())
	}
}
