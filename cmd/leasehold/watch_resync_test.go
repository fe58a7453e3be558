package main

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// TestCLIWatchResyncPrintsState: `watch --from-index N --resync` whose
// index is no longer held prints the current state (a compacted object with
// the locks at an index) and goes on with the events after that index.
func TestCLIWatchResyncPrintsState(t *testing.T) {
	t.Parallel()
	srv := startServeAt(t, t.TempDir(), "", "--watch-history", "2")
	kept := ok[holdingOut](t, srv.cli(t, "acquire", "c:kept", "--ttl", "30s", "-o", "json"))
	for i := range 3 {
		h := ok[holdingOut](t, srv.cli(t, "acquire", fmt.Sprintf("c:%d", i), "--ttl", "30s", "-o", "json"))
		ok[releaseOut](t, srv.cli(t, "release", h.Name, "--lease", h.LeaseID, "--token", fmt.Sprint(h.Token), "-o", "json"))
	}
	lines, stderr := watchLines(t, "watch", "c:", "--from-index", "1", "--resync", "-o", "json", "--endpoints", srv.Addr)
	next := func(what string) string {
		t.Helper()
		select {
		case line, open := <-lines:
			if !open {
				t.Fatalf("%s: watch ended; stderr: %s", what, stderr.String())
			}
			return line
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: no line; stderr: %s", what, stderr.String())
		}
		return ""
	}
	var st struct {
		Type  string `json:"type"`
		Index uint64 `json:"index"`
		Locks []struct {
			Name   string `json:"name"`
			Holder struct {
				Token uint64 `json:"token"`
			} `json:"holder"`
		} `json:"locks"`
	}
	line := next("the state")
	if err := json.Unmarshal([]byte(line), &st); err != nil {
		t.Fatalf("state line %q: %v", line, err)
	}
	if st.Type != "compacted" || st.Index == 0 || len(st.Locks) != 1 || st.Locks[0].Name != "c:kept" || st.Locks[0].Holder.Token != kept.Token {
		t.Fatalf("state line %q, want compacted with c:kept token %d", line, kept.Token)
	}
	ok[releaseOut](t, srv.cli(t, "release", kept.Name, "--lease", kept.LeaseID, "--token", fmt.Sprint(kept.Token), "-o", "json"))
	ev := oneJSON[eventOut](t, result{args: []string{"watch"}, stdout: next("the release after the state")})
	if ev.Type != "released" || ev.Name != "c:kept" || ev.Index <= st.Index {
		t.Fatalf("after the state at index %d got %+v, want released c:kept after it", st.Index, ev)
	}
}
