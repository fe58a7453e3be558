package client_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// BenchmarkLockTransport is an acquire+release pair per op from 1, 8 and
// 32 goroutines per CPU (GOMAXPROCS), each with its own session and name, with the lock calls on
// the Client's lock stream (transport=stream, the default) or as unary
// RPCs (transport=unary, WithUnaryLocks), against one server. ns/op is
// per pair across all goroutines; allocs/op and B/op include the server's
// (same process), and so does cpu-µs/op, the process's CPU per pair (to
// set beside internal/raftnode's BenchmarkApplyParallel, the same pairs
// below the RPC layer). Run with -count to interleave the two transports:
//
//	go test ./client/ -run '^$' -bench LockTransport -benchtime 2000x -count 2
func BenchmarkLockTransport(b *testing.B) {
	srv, _ := benchServer(b)
	for _, tr := range []string{"unary", "stream"} {
		var opts []client.DialOption
		if tr == "unary" {
			opts = append(opts, client.WithUnaryLocks())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := client.Dial(ctx, srv.Addr, opts...)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		var sessions []*client.Session
		for _, par := range []int{1, 8, 32} {
			g := par * runtime.GOMAXPROCS(0)
			for len(sessions) < g {
				sessions = append(sessions, benchSession(b, c))
			}
			b.Run(fmt.Sprintf("transport=%s/goroutines=%d", tr, g), func(b *testing.B) {
				b.ReportAllocs()
				var next atomic.Int64
				ctx := context.Background()
				b.SetParallelism(par)
				cpu0 := servertest.ProcessCPU(b)
				b.ResetTimer()
				b.RunParallel(func(p *testing.PB) {
					i := int(next.Add(1) - 1)
					acquireReleaseLoop(ctx, b, p, sessions[i], fmt.Sprintf("bench/%s/%d", tr, i))
				})
				b.StopTimer()
				reportOps(b)
				b.ReportMetric(float64((servertest.ProcessCPU(b)-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
			})
		}
	}
}
