package client_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
)

// rss is the resident set of process pid, from /proc.
func rss(b *testing.B, pid int) uint64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmRSS")
	return 0
}

// BenchmarkSessionsHoldingLocks sets up b.N sessions on one Client (TTL
// 10 s), each holding its own lock, against a single-node server in its own
// process (durable, fsync'd), 64 at a time; then keeps them for 1.5 TTLs
// and checks that none was lost. Run it with -benchtime=100000x for the
// 100,000-session figure. It reports the setup rate, the client's heap and
// stacks per session, and the server's resident memory per session.
func BenchmarkSessionsHoldingLocks(b *testing.B) {
	addr, pid := startServerProcess(b)
	c := dial(b, addr)
	const ttl = 10 * time.Second
	n := b.N
	sessions := make([]*client.Session, n)
	locks := make([]*client.Lock, n)
	client0, server0 := liveBytes(), rss(b, pid)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	b.ResetTimer()
	var wg sync.WaitGroup
	next := make(chan int)
	for range 64 {
		wg.Go(func() {
			for i := range next {
				s, err := c.NewSession(ctx, client.WithTTL(ttl))
				if err != nil {
					b.Error(err)
					continue
				}
				l, err := s.TryAcquire(ctx, fmt.Sprintf("many:%d", i))
				if err != nil {
					b.Error(err)
					continue
				}
				sessions[i], locks[i] = s, l
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	b.StopTimer()
	setup := time.Since(start)
	client1, server1 := liveBytes(), rss(b, pid)
	hold := time.After(ttl * 3 / 2)
	<-hold
	lost := 0
	for i, s := range sessions {
		if s == nil || s.Err() != nil || locks[i] == nil || locks[i].Context().Err() != nil {
			lost++
		}
	}
	if lost > 0 {
		b.Errorf("%d of %d sessions lost their lock within 1.5 TTLs", lost, n)
	}
	b.ReportMetric(float64(n)/setup.Seconds(), "sessions/s")
	b.ReportMetric(setup.Seconds(), "setup-s")
	b.ReportMetric((float64(client1)-float64(client0))/float64(n), "client-B/session")
	b.ReportMetric((float64(server1)-float64(server0))/float64(n), "server-B/session")
}
