package leaseholdtest_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/leaseholdtest"
)

// A test of code that takes a lock runs against a real server in its own
// process.
func ExampleNewServer() {
	srv, err := leaseholdtest.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	c, err := client.Dial(ctx, srv.Addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	s, err := c.NewSession(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(ctx)
	l, err := s.Acquire(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding with a token:", l.Token() > 0)
	// Output: holding with a token: true
}

// Close stops the server: it no longer answers, and its data is gone.
func TestCloseRemovesData(t *testing.T) {
	srv, err := leaseholdtest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.KVPut(ctx, "k", []byte("v"), l.Token(), false); err != nil {
		t.Fatal(err)
	}
	dir := srv.Dir()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("data dir %s after Close: %v, want it removed", dir, err)
	}
	short, cancel2 := context.WithTimeout(ctx, 2*time.Second)
	defer cancel2()
	if _, _, err := c.KVGet(short, "k"); err == nil {
		t.Fatal("a read after Close succeeded")
	}
}
