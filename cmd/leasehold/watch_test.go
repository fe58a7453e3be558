package main

import (
	"fmt"
	"testing"
)

// TestCLIWatchFromEvictedIndexIsCompacted: `watch --from-index N` exits with
// the compacted code when the node's history no longer holds index N,
// instead of starting with a silent gap.
func TestCLIWatchFromEvictedIndexIsCompacted(t *testing.T) {
	t.Parallel()
	srv := startServeAt(t, t.TempDir(), "", "--watch-history", "2")
	for i := range 3 {
		h := ok[holdingOut](t, srv.cli(t, "acquire", fmt.Sprintf("c:%d", i), "--ttl", "30s", "-o", "json"))
		ok[releaseOut](t, srv.cli(t, "release", h.Name, "--lease", h.LeaseID, "--token", fmt.Sprint(h.Token), "-o", "json"))
	}
	fails(t, srv.cli(t, "watch", "c:", "--from-index", "1", "-o", "json"), "compacted", 15)
	fails(t, srv.cli(t, "serve", "--watch-history", "0", "-o", "json"), "invalid-argument", 2)
}
