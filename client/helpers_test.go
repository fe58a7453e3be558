package client_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/harness/netfault"
	"github.com/leasehold/leasehold/internal/harness/servertest"
	"github.com/leasehold/leasehold/internal/server"
	"github.com/leasehold/leasehold/internal/testserver"
)

// helperEnv selects a helper mode when the test binary re-executes itself
// (see runHolder).
const helperEnv = "LEASEHOLD_CLIENT_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "holder":
		os.Exit(runHolder()) // a helper process: killed or ended by its parent
	case "server":
		os.Exit(runServer()) // a helper process: ends when its stdin closes
	}
	// raft may drop a future at shutdown; Node.await leaves its waiter behind.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/leasehold/leasehold/internal/raftnode.(*Node).await.func1"))
}

// testServer is an in-process single-node leasehold server on a temp dir
// and a 127.0.0.1 port.
type testServer = testserver.Server

// openServer starts a server on dir, edited by configure, and waits for it
// to lead.
func openServer(dir string, logger *slog.Logger, configure ...func(*server.Config)) (*testServer, error) {
	return testserver.Open(dir, logger, configure...)
}

// startServer starts a server that stops when the test ends.
func startServer(t testing.TB, configure ...func(*server.Config)) *testServer {
	t.Helper()
	ts, err := openServer(t.TempDir(), servertest.Logger(t), configure...)
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	t.Cleanup(func() {
		if err := ts.Stop(); err != nil {
			t.Errorf("stop server: %v", err)
		}
	})
	return ts
}

// dial returns a client of addr that is closed when the test ends.
func dial(t testing.TB, endpoints string, opts ...client.DialOption) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, endpoints, opts...)
	if err != nil {
		t.Fatalf("dial %s: %v", endpoints, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newSession creates a session that is closed (best effort) when the test
// ends.
func newSession(t testing.TB, c *client.Client, opts ...client.SessionOption) *client.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.NewSession(ctx, opts...)
	if err != nil {
		t.Fatalf("new session: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

// testCtx is a context bounded well inside the test binary's timeout.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it is true and fails the test after d.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		<-tick.C
	}
}

// recv waits at most d for a value from ch.
func recv[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %s waiting for %s", d, what)
		panic("unreachable")
	}
}

// closedWithin reports whether ch is closed within d.
func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// isClosed reports whether ch is closed now.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// discardLogger is for examples, whose output is checked.
func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newProxy is a netfault proxy to addr, closed at the end of the test.
func newProxy(t testing.TB, addr string) *netfault.Proxy {
	t.Helper()
	p, err := netfault.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}
