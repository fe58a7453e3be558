package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
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
// a lock keeps it, and the server's peak memory stays bounded.
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
	const bound = 512 << 20 // a -race binary; 220 MiB measured
	if peak := peakRSS(t, srv.cmd.Process.Pid); peak > bound {
		t.Fatalf("the server's peak RSS is %d MiB under 2000 watch attempts with --limit watches=200; bound %d MiB", peak>>20, bound>>20)
	} else {
		t.Logf("peak RSS %d MiB", peak>>20)
	}
}
