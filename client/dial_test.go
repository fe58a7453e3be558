package client_test

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
)

func TestDialFailover(t *testing.T) {
	ts := startServer(t)
	dead := deadAddr(t)
	c := dial(t, dead+","+ts.Addr)
	ctx := testCtx(t)
	s := newSession(t, c)
	l, err := s.Acquire(ctx, "failover")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.KVPut(ctx, "failover", []byte("x"), l.Token(), false); err != nil {
		t.Fatal(err)
	}
	// The same with the order reversed: the dead endpoint is never needed.
	c2 := dial(t, ts.Addr+", "+dead)
	if _, _, err := c2.KVGet(ctx, "failover"); err != nil {
		t.Fatal(err)
	}
}

// Nothing listening at any endpoint: the first call fails at once with
// "no server at ADDR", instead of retrying for the retry timeout, and names
// the real operation (Dial sends nothing).
func TestNoServerFailsFast(t *testing.T) {
	ctx := testCtx(t)
	eps := deadAddr(t) + "," + deadAddr(t)
	c, err := client.Dial(ctx, eps, client.WithRetryTimeout(time.Hour))
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	_, err = c.Status(ctx, "x")
	if !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Status against dead endpoints = %v, want ErrUnavailable", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("Status returned only when the test's context ended: %v", err)
	}
	want := "leasehold: unavailable: status: no server at " + strings.ReplaceAll(eps, ",", ", ")
	if err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	if _, err := client.Dial(ctx, " , "); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("Dial with no endpoints = %v, want ErrInvalidArgument", err)
	}
}

// deadAddr returns a 127.0.0.1 address nothing listens on.
func deadAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
