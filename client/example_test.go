package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/leaseholdtest"
)

// The seed scenario with a clean release instead of an expiry: the old
// holder's token is refused by the fenced KV once a newer holder wrote.
func Example() {
	srv, err := leaseholdtest.NewServer() // a server in this process; yours runs leasehold serve
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	// outcome names a call's result the way the CLI does.
	outcome := func(err error) string {
		if err == nil {
			return "accepted"
		}
		return string(api.CodeOf(err))
	}
	ctx := context.Background()

	c, err := client.Dial(ctx, srv.Addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	a, err := c.NewSession(ctx, client.WithTTL(10*time.Second), client.WithOwner("worker-A"))
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close(ctx)
	la, err := a.Acquire(ctx, "report:417:rebuild") // blocks in the server's FIFO queue
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("worker-A writes v1:", outcome(c.KVPut(ctx, "report:417", []byte("v1"), la.Token(), false)))
	if err := la.Release(ctx); err != nil {
		log.Fatal(err)
	}

	b, err := c.NewSession(ctx, client.WithOwner("worker-B"))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close(ctx)
	lb, err := b.Acquire(ctx, "report:417:rebuild")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("worker-B token is larger:", lb.Token() > la.Token())
	fmt.Println("worker-B writes v2:", outcome(c.KVPut(ctx, "report:417", []byte("v2"), lb.Token(), false)))
	fmt.Println("worker-A writes late:", outcome(c.KVPut(ctx, "report:417", []byte("late"), la.Token(), false)))
	fmt.Println("worker-A releases again:", outcome(la.Release(ctx)))

	v, _, err := c.KVGet(ctx, "report:417")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("value:", string(v))
	// Output:
	// worker-A writes v1: accepted
	// worker-B token is larger: true
	// worker-B writes v2: accepted
	// worker-A writes late: stale-token
	// worker-A releases again: not-holder
	// value: v2
}

// TryAcquire fails at once when another session holds the name.
func ExampleSession_TryAcquire() {
	srv, err := leaseholdtest.NewServer() // a server in this process; yours runs leasehold serve
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

	holder, err := c.NewSession(ctx, client.WithOwner("holder"))
	if err != nil {
		log.Fatal(err)
	}
	defer holder.Close(ctx)
	if _, err := holder.Acquire(ctx, "nightly-backup"); err != nil {
		log.Fatal(err)
	}

	other, err := c.NewSession(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer other.Close(ctx)
	_, err = other.TryAcquire(ctx, "nightly-backup")
	switch {
	case errors.Is(err, client.ErrLocked):
		info, err := c.Status(ctx, "nightly-backup")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("locked by", info.GetHolder().GetOwner())
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println("acquired")
	}
	// Output:
	// locked by holder
}

// A holder stops its critical section when Lock.Done closes; the cause
// says why.
func ExampleLock_Done() {
	srv, err := leaseholdtest.NewServer() // a server in this process; yours runs leasehold serve
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
	s, err := c.NewSession(ctx, client.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(ctx)
	l, err := s.Acquire(ctx, "report:417:rebuild")
	if err != nil {
		log.Fatal(err)
	}

	work := func(step int) { _ = step } // one step of the critical section
	for step := range 3 {
		select {
		case <-l.Done():
			fmt.Println("stopping:", context.Cause(l.Context()))
			return
		default:
			work(step) // writes carry l.Token() so the resource can refuse them if late
		}
	}
	if err := l.Release(ctx); err != nil {
		log.Fatal(err)
	}
	<-l.Done()
	fmt.Println("done:", context.Cause(l.Context()))
	// Output:
	// done: client: lock released
}

// A fenced write with an older token than the last accepted one is
// refused; the error carries the last accepted token.
func ExampleClient_KVPut() {
	srv, err := leaseholdtest.NewServer() // a server in this process; yours runs leasehold serve
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

	old, err := s.Acquire(ctx, "config")
	if err != nil {
		log.Fatal(err)
	}
	if err := old.Release(ctx); err != nil {
		log.Fatal(err)
	}
	cur, err := s.Acquire(ctx, "config")
	if err != nil {
		log.Fatal(err)
	}
	if err := c.KVPut(ctx, "config", []byte("new"), cur.Token(), false); err != nil {
		log.Fatal(err)
	}
	err = c.KVPut(ctx, "config", []byte("old"), old.Token(), false)
	if errors.Is(err, client.ErrStaleToken) {
		fmt.Println("refused; last accepted token is the current holder's:", api.FromError(err).LastToken == cur.Token())
	}
	// Output:
	// refused; last accepted token is the current holder's: true
}

// A watch that resumes from a log index: events already seen are not
// delivered again, and a history that no longer holds them says so.
func ExampleClient_Watch() {
	srv, err := leaseholdtest.NewServer() // a server in this process; yours runs leasehold serve
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := client.Dial(ctx, srv.Addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	s, err := c.NewSession(ctx, client.WithOwner("worker-A"))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(ctx)
	for _, name := range []string{"job:1", "job:2"} {
		l, err := s.Acquire(ctx, name)
		if err != nil {
			log.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			log.Fatal(err)
		}
	}

	// Replay everything the server's history holds, from index 1.
	events, err := c.Watch(ctx, "job:", client.FromIndex(1))
	if errors.Is(err, client.ErrCompacted) {
		log.Fatal("history gone: read the state with List, then watch from now")
	}
	if err != nil {
		log.Fatal(err)
	}
	seen := 0
	for ev, err := range events {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(strings.ToLower(strings.TrimPrefix(ev.GetType().String(), "EVENT_TYPE_")), ev.GetName(), ev.GetIndex() > 0)
		if seen++; seen == 4 {
			break
		}
	}
	// Output:
	// acquired job:1 true
	// released job:1 true
	// acquired job:2 true
	// released job:2 true
}
