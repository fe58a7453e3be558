package web

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

type noSource struct{}

func (noSource) Viewer(context.Context) Viewer { return Viewer{View: true, Admin: true} }
func (noSource) State(context.Context, Viewer) (State, error) {
	return State{Node: "n1"}, nil
}
func (noSource) Raft() Raft { return Raft{Role: "leader", Term: 3} }
func (noSource) KV(context.Context, Viewer, string, string) (KVPage, error) {
	return KVPage{}, nil
}
func (noSource) ForceRelease(context.Context, string, string, uint64) error { return nil }
func (noSource) EndSession(context.Context, string) error                   { return nil }

// readEvents reads n events from an event stream.
func readEvents(t *testing.T, sc *bufio.Scanner, n int) []Event {
	t.Helper()
	var out []Event
	for len(out) < n && sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var ev Event
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatal(err)
			}
			out = append(out, ev)
		}
	}
	if len(out) < n {
		t.Fatalf("stream ended after %d events, want %d: %v", len(out), n, sc.Err())
	}
	return out
}

func openStream(t *testing.T, url, lastID string) (*bufio.Scanner, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/ui/api/events", nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %q", ct)
	}
	return bufio.NewScanner(resp.Body), func() { cancel(); resp.Body.Close() }
}

// TestEventsBacklogResumeAndLive: a new stream gets the kept events, then
// live ones; a stream resumed with Last-Event-ID gets only what followed.
func TestEventsBacklogResumeAndLive(t *testing.T) {
	feed := NewFeed()
	done := make(chan struct{})
	srv := httptest.NewServer(Handler(noSource{}, feed, done))
	defer srv.Close()
	defer close(done)
	for _, name := range []string{"a", "b", "c"} {
		feed.Publish(Event{Type: "acquired", Name: name})
	}
	sc, stop := openStream(t, srv.URL, "")
	got := readEvents(t, sc, 3)
	if got[0].Seq != 1 || got[2].Name != "c" {
		t.Fatalf("backlog = %+v", got)
	}
	feed.Publish(Event{Type: "kv_refused", Name: "k", Token: 1, LastToken: 2, Reason: "stale-token"})
	if live := readEvents(t, sc, 1)[0]; live.Seq != 4 || live.Type != "kv_refused" || live.LastToken != 2 {
		t.Fatalf("live event = %+v", live)
	}
	stop()

	sc, stop = openStream(t, srv.URL, "2")
	defer stop()
	if got := readEvents(t, sc, 2); got[0].Seq != 3 || got[1].Seq != 4 {
		t.Fatalf("resumed after 2: %+v", got)
	}
}

// TestFeedDropsLaggard: Publish never blocks; a subscriber that falls more
// than its buffer behind is dropped (its channel closed), and the backlog
// keeps only the last Backlog events.
func TestFeedDropsLaggard(t *testing.T) {
	feed := NewFeed()
	_, ch, cancel := feed.subscribe(0)
	defer cancel()
	for range Backlog + 10 {
		feed.Publish(Event{Type: "acquired"})
	}
	n := 0
	for range ch {
		n++
	}
	if n != subscriberBuffer {
		t.Fatalf("the laggard got %d events before being dropped, want %d", n, subscriberBuffer)
	}
	if feed.Subscribers() != 0 {
		t.Fatalf("%d subscribers after the drop", feed.Subscribers())
	}
	backlog, _, cancel2 := feed.subscribe(0)
	defer cancel2()
	if len(backlog) != Backlog || backlog[0].Seq != 11 {
		t.Fatalf("backlog has %d events from seq %d, want %d from 11", len(backlog), backlog[0].Seq, Backlog)
	}
	for i, ev := range backlog {
		if ev.Seq != uint64(11+i) {
			t.Fatalf("backlog[%d] is seq %d, want %d: oldest first, in order", i, ev.Seq, 11+i)
		}
	}
}

// TestStateAndPage: the state endpoint serves the source's JSON and the
// page is embedded.
func TestStateAndPage(t *testing.T) {
	done := make(chan struct{})
	defer close(done)
	srv := httptest.NewServer(Handler(noSource{}, NewFeed(), done))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/ui/api/state")
	if err != nil {
		t.Fatal(err)
	}
	var st State
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.Node != "n1" {
		t.Fatalf("state = %+v, %v", st, err)
	}
	resp, err = http.Get(srv.URL + "/ui/api/raft")
	if err != nil {
		t.Fatal(err)
	}
	var r Raft
	err = json.NewDecoder(resp.Body).Decode(&r)
	resp.Body.Close()
	if err != nil || r.Role != "leader" || r.Term != 3 {
		t.Fatalf("raft = %+v, %v", r, err)
	}
	for _, path := range []string{"/ui/", "/ui/app.js", "/ui/style.css"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s = %d", path, resp.StatusCode)
		}
	}
}
