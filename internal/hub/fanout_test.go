package hub

import (
	"testing"

	"github.com/leasehold/leasehold/internal/fsm"
)

func woken(w *Watcher) bool {
	select {
	case <-w.Wake():
		return true
	default:
		return false
	}
}

// Events of other prefixes do not wake a watcher that has taken every event
// (its stream would only scan past them), yet it is still sent every event
// of its prefix, in order, and the applied index it reports covers the
// others; the lag limit counts none of them.
func TestHubWakesOnlyWatchersOfTheEvent(t *testing.T) {
	h := New(8) // a watcher may lag 4 events
	w, _, err := h.Watch("a/", 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 10; i++ { // more than the lag limit
		h.Publish(i, []fsm.Event{{Name: "b/x", Index: i}})
		if woken(w) {
			t.Fatalf("the watcher of a/ was woken by an event of b/x (index %d)", i)
		}
	}
	select {
	case <-w.Ended():
		t.Fatalf("the watcher of a/ was ended by events of b/x: %v", w.Err())
	default:
	}
	evs, covered := h.Next(w, 100)
	if len(evs) != 0 || covered != 10 {
		t.Fatalf("next = %v, covered %d; want no event, covered 10", evs, covered)
	}
	h.Publish(11, []fsm.Event{{Name: "b/y", Index: 11}, {Name: "a/1", Index: 11}})
	if !woken(w) {
		t.Fatal("the watcher of a/ was not woken by an event of a/1")
	}
	h.Publish(12, []fsm.Event{{Name: "b/x", Index: 12}})
	h.Publish(13, []fsm.Event{{Name: "a/2", Index: 13}})
	evs, covered = h.Next(w, 100)
	if len(evs) != 2 || evs[0].Name != "a/1" || evs[1].Name != "a/2" || covered != 13 {
		t.Fatalf("next = %v, covered %d; want a/1 then a/2, covered 13", evs, covered)
	}
}

// A watcher that events of other prefixes do not wake is still woken once
// the log has moved progressEvery entries past its last wake-up, so that its
// stream reports an applied index that close to the node's.
func TestHubWakesAQuietWatcherForProgress(t *testing.T) {
	h := New(1000)
	w, start, err := h.Watch("a/", 0)
	if err != nil {
		t.Fatal(err)
	}
	if start != 0 {
		t.Fatalf("start %d, want 0", start)
	}
	for i := uint64(1); i < progressEvery; i++ {
		h.Publish(i, []fsm.Event{{Name: "b/x", Index: i}})
		if woken(w) {
			t.Fatalf("woken at index %d, before %d entries passed", i, progressEvery)
		}
	}
	h.Publish(progressEvery, []fsm.Event{{Name: "b/x", Index: progressEvery}})
	if !woken(w) {
		t.Fatalf("not woken after %d entries of other prefixes", progressEvery)
	}
	if evs, covered := h.Next(w, 100); len(evs) != 0 || covered != progressEvery {
		t.Fatalf("next = %v, covered %d; want no event, covered %d", evs, covered, progressEvery)
	}
}
