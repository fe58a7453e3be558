// Command gobench measures the Go client's lock+unlock pairs per second
// against a running server, for clients/python/bench/bench.py to print
// beside the Python client's: c goroutines, each with its own session and
// name, acquire and release in a loop for d.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/client"
)

func main() {
	addr := flag.String("addr", client.DefaultEndpoint, "server address")
	c := flag.Int("c", 1, "concurrent holders")
	d := flag.Duration("d", 3*time.Second, "duration")
	flag.Parse()
	ctx := context.Background()
	cl, err := client.Dial(ctx, *addr)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = cl.Close() }()
	sessions := make([]*client.Session, *c)
	for i := range sessions {
		if sessions[i], err = cl.NewSession(ctx, client.WithOwner("gobench")); err != nil {
			log.Fatal(err)
		}
	}
	var pairs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(*d)
	for i, s := range sessions {
		name := fmt.Sprintf("bench/go/%d/%d", *c, i)
		wg.Go(func() {
			for time.Now().Before(stop) {
				l, err := s.Acquire(ctx, name)
				if err != nil {
					log.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					log.Fatal(err)
				}
				pairs.Add(1)
			}
		})
	}
	wg.Wait()
	fmt.Printf("%.0f\n", float64(pairs.Load())/time.Since(start).Seconds())
	for _, s := range sessions {
		_ = s.Close(ctx)
	}
}
