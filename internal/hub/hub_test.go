package hub

import (
	"testing"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/internal/fsm"
)

func hubEvents(from, to uint64) []fsm.Event {
	var evs []fsm.Event
	for i := from; i <= to; i++ {
		evs = append(evs, fsm.Event{Name: "s:x", Index: i})
	}
	return evs
}

func publishAll(h *Hub, evs []fsm.Event) {
	for _, ev := range evs {
		h.Publish(ev.Index, []fsm.Event{ev})
	}
}

// A watcher that falls too far behind is ended with resource-exhausted,
// never dropped silently, while the history still holds every event after
// the last one it took: it resumes from there with no gap. Once the history
// has moved on, the same resume is compacted.
func TestHubSlowWatcherEndsAndResumes(t *testing.T) {
	h := New(8) // a watcher may lag 4 events
	w, _, err := h.Watch("s:", 0)
	if err != nil {
		t.Fatal(err)
	}
	publishAll(h, hubEvents(1, 2))
	got, _ := h.Next(w, 100)
	if len(got) != 2 {
		t.Fatalf("took %d events, want 2", len(got))
	}
	publishAll(h, hubEvents(3, 7)) // 5 behind
	select {
	case <-w.Ended():
	default:
		t.Fatal("a watcher 5 events behind (limit 4) is still registered")
	}
	if api.CodeOf(w.Err()) != api.CodeResourceExhausted {
		t.Fatalf("the slow watcher ended with %v, want resource-exhausted", w.Err())
	}
	last := got[len(got)-1].Index
	r, start, err := h.Watch("s:", last+1)
	if err != nil {
		t.Fatalf("resume from %d: %v", last+1, err)
	}
	if start != last {
		t.Fatalf("resumed watch starts after %d, want %d", start, last)
	}
	evs, covered := h.Next(r, 100)
	if len(evs) != 5 || evs[0].Index != 3 || evs[4].Index != 7 || covered != 7 {
		t.Fatalf("resumed watch got %v (covered %d), want indexes 3..7", evs, covered)
	}
	publishAll(h, hubEvents(8, 20))
	if _, _, err := h.Watch("s:", last+1); api.CodeOf(err) != api.CodeCompacted {
		t.Fatalf("resume from %d after the history moved on: %v, want compacted", last+1, err)
	}
}

// After a snapshot install the history is empty and every watcher ends
// with compacted; until an entry is applied its floor is unknown, so a
// resume at or before the last index seen here is compacted.
func TestHubRestoredResetsHistory(t *testing.T) {
	h := New(8)
	publishAll(h, hubEvents(1, 3))
	w, _, err := h.Watch("", 0)
	if err != nil {
		t.Fatal(err)
	}
	h.Restored(0)
	select {
	case <-w.Ended():
	default:
		t.Fatal("a watcher outlived the snapshot install")
	}
	if api.CodeOf(w.Err()) != api.CodeCompacted {
		t.Fatalf("ended with %v, want compacted", w.Err())
	}
	if _, _, err := h.Watch("", 2); api.CodeOf(err) != api.CodeCompacted {
		t.Fatalf("watch from 2 after the install: %v, want compacted", err)
	}
	h.Publish(50, nil) // the first entry after the snapshot
	if _, _, err := h.Watch("", 49); api.CodeOf(err) != api.CodeCompacted {
		t.Fatalf("watch from 49 (in the snapshot): %v, want compacted", err)
	}
	r, _, err := h.Watch("", 50)
	if err != nil {
		t.Fatalf("watch from 50 (after the snapshot): %v", err)
	}
	h.Publish(51, hubEvents(51, 51))
	if evs, _ := h.Next(r, 10); len(evs) != 1 || evs[0].Index != 51 {
		t.Fatalf("after the snapshot got %v, want index 51", evs)
	}
}

// A watch replaying a long stretch of the history is not ended for the
// events it has yet to replay, only for those published after it started;
// one whose replay the history overtakes ends with compacted.
func TestHubReplayIsNotLag(t *testing.T) {
	h := New(8) // a watcher may lag 4 events
	publishAll(h, hubEvents(1, 7))
	w, _, err := h.Watch("s:", 1)
	if err != nil {
		t.Fatal(err)
	}
	publishAll(h, hubEvents(8, 8)) // evicts nothing yet: 8 held
	select {
	case <-w.Ended():
		t.Fatalf("a replaying watcher was ended: %v", w.Err())
	default:
	}
	evs, _ := h.Next(w, 100)
	if len(evs) != 8 || evs[0].Index != 1 {
		t.Fatalf("replay got %v, want indexes 1..8", evs)
	}
	slow, _, err := h.Watch("s:", 2)
	if err != nil {
		t.Fatal(err)
	}
	publishAll(h, hubEvents(9, 10)) // evicts index 1 and 2
	select {
	case <-slow.Ended():
	default:
		t.Fatal("a watcher whose next event was evicted is still registered")
	}
	if api.CodeOf(slow.Err()) != api.CodeCompacted {
		t.Fatalf("ended with %v, want compacted", slow.Err())
	}
}

// A snapshot install whose index is known starts the history right after
// it: a resume after the snapshot's index is served, even when the first
// entry published after it is not the next index (say, a raft
// configuration entry in between).
func TestHubRestoredAtKnownIndex(t *testing.T) {
	h := New(8)
	publishAll(h, hubEvents(1, 3))
	h.Restored(40)
	if _, _, err := h.Watch("", 40); api.CodeOf(err) != api.CodeCompacted {
		t.Fatalf("watch from 40 (in the snapshot): %v, want compacted", err)
	}
	r, _, err := h.Watch("", 41)
	if err != nil {
		t.Fatalf("watch from 41 (after the snapshot): %v", err)
	}
	h.Publish(43, hubEvents(43, 43))
	if evs, _ := h.Next(r, 10); len(evs) != 1 || evs[0].Index != 43 {
		t.Fatalf("after the snapshot got %v, want index 43", evs)
	}
}
