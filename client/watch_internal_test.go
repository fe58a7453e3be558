package client

import (
	"testing"
)

// A stream cut in the middle of one log entry's events resumes at that
// index and drops the part already delivered: no gap, no duplicate.
func TestWatchCursorResumesInsideAnEntry(t *testing.T) {
	ev := func(i uint64, name string) *Event { return &Event{Index: i, Name: name} }
	c := &watchCursor{live: true}
	if from := c.resume(); from != 0 {
		t.Fatalf("first from_index %d, want 0 (live)", from)
	}
	c.progress(9)
	for _, e := range []*Event{ev(10, "a"), ev(12, "b"), ev(12, "c")} {
		if !c.admit(e) {
			t.Fatalf("new event %v dropped", e)
		}
	}
	// Cut: index 12 may have more events than the two delivered.
	if from := c.resume(); from != 12 {
		t.Fatalf("resume from %d, want 12", from)
	}
	var got []string
	for _, e := range []*Event{ev(12, "b"), ev(12, "c"), ev(12, "d"), ev(13, "e")} {
		if c.admit(e) {
			got = append(got, e.Name)
		}
	}
	if len(got) != 2 || got[0] != "d" || got[1] != "e" {
		t.Fatalf("after the resume delivered %v, want [d e]", got)
	}
	c.progress(20)
	if from := c.resume(); from != 21 {
		t.Fatalf("resume after progress 20 from %d, want 21", from)
	}
	if c.admit(ev(20, "old")) {
		t.Fatal("an event covered by progress was delivered again")
	}
}
