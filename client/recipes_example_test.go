package client_test

import (
	"context"
	"fmt"
	"log"

	"github.com/leasehold/leasehold/api"
	leaseholdv1 "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/leaseholdtest"
)

// A semaphore of two permits: two sessions hold the name at once, each in
// its own slot with its own token; the third waits for a free slot. Each
// holder fences its writes under its slot's key.
func ExampleWithPermits() {
	ctx := context.Background()
	srv, err := leaseholdtest.NewServer() // a server in this process; yours runs leasehold serve
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	c, err := client.Dial(ctx, srv.Addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	var held []*client.Lock
	for _, owner := range []string{"worker-A", "worker-B"} {
		s, err := c.NewSession(ctx, client.WithOwner(owner))
		if err != nil {
			log.Fatal(err)
		}
		defer s.Close(ctx)
		l, err := s.Acquire(ctx, "encoder", client.WithPermits(2))
		if err != nil {
			log.Fatal(err)
		}
		held = append(held, l)
		fmt.Println(owner, "holds slot", l.Slot(), "and fences", l.SlotKey())
	}
	s3, err := c.NewSession(ctx, client.WithOwner("worker-C"))
	if err != nil {
		log.Fatal(err)
	}
	defer s3.Close(ctx)
	_, err = s3.TryAcquire(ctx, "encoder", client.WithPermits(2))
	fmt.Println("worker-C:", api.CodeOf(err))
	if err := held[0].Release(ctx); err != nil {
		log.Fatal(err)
	}
	l3, err := s3.Acquire(ctx, "encoder", client.WithPermits(2))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("worker-C holds slot", l3.Slot(), "with a newer token:", l3.Token() > held[1].Token())
	// Output:
	// worker-A holds slot 0 and fences encoder/slot/0
	// worker-B holds slot 1 and fences encoder/slot/1
	// worker-C: locked
	// worker-C holds slot 0 with a newer token: true
}

// A read/write lock: readers share the name; the writer waits for them,
// and its token is above every reader's, so a resource that saw the write
// can refuse a reader's older token.
func ExampleShared() {
	ctx := context.Background()
	srv, err := leaseholdtest.NewServer() // a server in this process; yours runs leasehold serve
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	c, err := client.Dial(ctx, srv.Addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	session := func(owner string) *client.Session {
		s, err := c.NewSession(ctx, client.WithOwner(owner))
		if err != nil {
			log.Fatal(err)
		}
		return s
	}
	r1, r2, w := session("reader-1"), session("reader-2"), session("writer")
	defer r1.Close(ctx)
	defer r2.Close(ctx)
	defer w.Close(ctx)

	l1, _ := r1.Acquire(ctx, "catalog", client.Shared())
	l2, _ := r2.Acquire(ctx, "catalog", client.Shared())
	info, _ := c.Status(ctx, "catalog")
	fmt.Println("readers holding:", len(info.GetHolders()))
	_, err = w.TryAcquire(ctx, "catalog")
	fmt.Println("writer while reading:", api.CodeOf(err))
	_ = l1.Release(ctx)
	_ = l2.Release(ctx)
	lw, err := w.Acquire(ctx, "catalog")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("writer token above the readers':", lw.Token() > l1.Token() && lw.Token() > l2.Token())
	// Output:
	// readers holding: 2
	// writer while reading: locked
	// writer token above the readers': true
}

// Leader election: the first candidate leads with epoch = its token; when
// it resigns, the next candidate in the queue is elected with a larger
// epoch. Observe reports each leader.
func ExampleSession_Campaign() {
	ctx := context.Background()
	srv, err := leaseholdtest.NewServer() // a server in this process; yours runs leasehold serve
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	c, err := client.Dial(ctx, srv.Addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	a, _ := c.NewSession(ctx, client.WithOwner("node-a"))
	b, _ := c.NewSession(ctx, client.WithOwner("node-b"))
	defer a.Close(ctx)
	defer b.Close(ctx)

	la, err := a.Campaign(ctx, "scheduler", []byte("node-a:9000"))
	if err != nil {
		log.Fatal(err)
	}
	v, epoch, _ := c.Leader(ctx, "scheduler")
	fmt.Printf("leader %s (epoch is the token: %v)\n", v, epoch == la.Epoch())
	if err := la.Proclaim(ctx, []byte("node-a:9001")); err != nil {
		log.Fatal(err)
	}
	v, _, _ = c.Leader(ctx, "scheduler")
	fmt.Printf("leader %s\n", v)

	events, err := c.Watch(ctx, "scheduler")
	if err != nil {
		log.Fatal(err)
	}
	elected := make(chan *client.Leadership, 1)
	go func() {
		lb, err := b.Campaign(ctx, "scheduler", []byte("node-b:9000"))
		if err != nil {
			log.Fatal(err)
		}
		elected <- lb
	}()
	for ev := range events { // wait until node-b is queued
		if ev.GetType() == leaseholdv1.EventType_EVENT_TYPE_QUEUED {
			break
		}
	}
	_ = la.Resign(ctx)
	lb := <-elected
	fmt.Printf("leader %s with a larger epoch: %v\n", lb.Value(), lb.Epoch() > la.Epoch())
	// Output:
	// leader node-a:9000 (epoch is the token: true)
	// leader node-a:9001
	// leader node-b:9000 with a larger epoch: true
}
