package client_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/leaseholdtest"
)

// A watch from an index the server's history no longer holds resyncs from
// the state the server sends instead, then goes on with the events after it.
func ExampleOnCompacted() {
	// A server that keeps only the 2 latest events for FromIndex.
	srv, err := leaseholdtest.NewServer(leaseholdtest.WithWatchHistory(2))
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
	kept, err := s.Acquire(ctx, "job:kept")
	if err != nil {
		log.Fatal(err)
	}
	for _, name := range []string{"job:1", "job:2"} { // 4 events: the history keeps 2
		l, err := s.Acquire(ctx, name)
		if err != nil {
			log.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			log.Fatal(err)
		}
	}

	held := map[string]string{} // name → owner, kept from the state and the events
	events, err := c.Watch(ctx, "job:", client.FromIndex(1), client.OnCompacted(func(st *client.Compacted) {
		clear(held)
		for _, l := range st.GetLocks() {
			held[l.GetName()] = l.GetHolder().GetOwner()
		}
		fmt.Println("resynced:", held)
	}))
	if err != nil {
		log.Fatal(err)
	}
	// The state was taken when Watch returned: this release comes after it.
	if err := kept.Release(ctx); err != nil {
		log.Fatal(err)
	}
	for ev, err := range events {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(strings.ToLower(strings.TrimPrefix(ev.GetType().String(), "EVENT_TYPE_")), ev.GetName())
		delete(held, ev.GetName())
		break
	}
	fmt.Println("held:", held)
	// Output:
	// resynced: map[job:kept:worker-A]
	// released job:kept
	// held: map[]
}
