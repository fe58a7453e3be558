package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// TestCLILimitFlag: serve --limit sets a limit, and a refusal reaches the
// CLI as resource-exhausted (exit 9) naming the flag; a bad --limit is a
// usage error.
func TestCLILimitFlag(t *testing.T) {
	t.Parallel()
	r := cli(t, "serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--limit", "watchez=1")
	if r.code != 2 || !strings.Contains(r.stderr+r.stdout, `unknown limit "watchez"`) {
		t.Fatalf("serve --limit watchez=1: %v", r)
	}
	srv := startServeAt(t, t.TempDir(), "", "--limit", "rate=0.001,burst=3")
	for range 3 {
		ok[statusOut](t, srv.cli(t, "status", "x", "-o", "json"))
	}
	e := fails(t, srv.cli(t, "status", "x", "-o", "json"), "resource-exhausted", 9)
	if !strings.Contains(e.Error.Message, "serve --limit rate=N") {
		t.Fatalf("the refusal %q does not name its flag", e.Error.Message)
	}
}

// TestCLIWatchFloodBounded opens 2 000 watch streams against a real server
// started with --limit watches=200: the rest are refused, a client holding
// a lock keeps it, and the server holds the resources of 200 streams, not
// of 2 000. That is counted in goroutines (each held stream keeps its
// handler's): the process's peak memory does not tell the two apart at this
// size under the race detector, where refusals in flight cost as much as
// the streams held.
func TestCLIWatchFloodBounded(t *testing.T) {
	t.Parallel()
	srv := startServeAt(t, t.TempDir(), "", "--limit", "watches=200")
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.NewSession(ctx, client.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	l, err := s.Acquire(ctx, "canary")
	if err != nil {
		t.Fatal(err)
	}
	f, err := client.Dial(ctx, srv.Addr) // the flood's own client
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	base := serverGoroutines(t, srv.Addr)
	flood, stop := context.WithCancel(ctx)
	var mu sync.Mutex
	held, refused := 0, 0
	var wg sync.WaitGroup
	for range 2000 {
		wg.Go(func() {
			events, err := f.Watch(flood, "w:")
			if err == nil {
				// A refusal is the stream's first (and last) answer.
				for _, err = range events {
					break
				}
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, client.ErrResourceExhausted):
				refused++
			case flood.Err() != nil:
				held++
			default:
				t.Errorf("watch: %v", err)
			}
		})
	}
	eventually(t, 30*time.Second, "1800 watches refused", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return refused >= 1800
	})
	// A held stream costs about one goroutine (its handler); 2 000 held
	// would cost 2 000 or more. Refusals still winding down pass, so the
	// count is polled.
	bound := base + 2*200 + 50
	g := 0
	eventually(t, 10*time.Second, fmt.Sprintf("at most %d server goroutines with 200 watches held (%d before the flood)", bound, base), func() bool {
		g = serverGoroutines(t, srv.Addr)
		return g <= bound
	})
	t.Logf("server goroutines: %d before the flood, %d with 200 watches held", base, g)
	select {
	case <-l.Done():
		t.Fatalf("the lock was lost under the watch flood: %v", context.Cause(l.Context()))
	default:
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release under the watch flood: %v", err)
	}
	stop()
	wg.Wait()
	if held != 200 || refused != 1800 {
		t.Fatalf("%d watches held, %d refused; want 200 and 1800", held, refused)
	}
	t.Logf("peak RSS %d MiB", peakRSS(t, srv.cmd.Process.Pid)>>20)
}

// serverGoroutines reads go_goroutines from the server's /metrics.
func serverGoroutines(t *testing.T, addr string) int {
	t.Helper()
	return int(servertest.Metric(t, addr, "go_goroutines"))
}
