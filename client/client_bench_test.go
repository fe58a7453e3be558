package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/harness/servertest"
	"github.com/leasehold/leasehold/internal/server"
)

// The benchmarks below run against a real single-node server on a
// b.TempDir() data dir over 127.0.0.1: durable, every raft append batch
// fsync'd before any answer, with the raft timings of `leasehold serve`
// (servertest's shortened ones are put back to the defaults). One server is
// started per benchmark and stopped in b.Cleanup. Every op is a full round
// trip through the Go client (gRPC over cleartext HTTP/2).

// benchServer starts the server and dials a client to it.
func benchServer(b *testing.B, configure ...func(*server.Config)) (*servertest.Cluster, *client.Client) {
	b.Helper()
	srv := servertest.Start(b, servertest.Options{
		Logger: slog.New(slog.DiscardHandler),
		Configure: func(cfg *server.Config) {
			def := server.DefaultConfig(cfg.Raft.DataDir, cfg.APIAddr)
			cfg.Raft.HeartbeatTimeout = def.Raft.HeartbeatTimeout
			cfg.Raft.ElectionTimeout = def.Raft.ElectionTimeout
			cfg.Raft.LeaderLeaseTimeout = def.Raft.LeaderLeaseTimeout
			cfg.Raft.CommitTimeout = def.Raft.CommitTimeout
			cfg.Lessor.Grace = def.Lessor.Grace // 0: Open's default
			for _, f := range configure {
				f(cfg)
			}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, srv.Addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return srv, c
}

// benchSession creates a session that is closed in b.Cleanup.
func benchSession(b *testing.B, c *client.Client) *client.Session {
	b.Helper()
	s, err := c.NewSession(context.Background(), client.WithOwner("bench"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			b.Errorf("close session: %v", err)
		}
	})
	return s
}

// reportOps reports ops/s; call it after the timed loop.
func reportOps(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkAcquireRelease is one session acquiring and releasing one name,
// sequentially: two raft commands, each waiting for its own fsync.
func BenchmarkAcquireRelease(b *testing.B) {
	c, fsyncs := benchServerCountingFsyncs(b)
	s := benchSession(b, c)
	ctx := context.Background()
	fsyncs.reset(b)
	for b.Loop() {
		l, err := s.Acquire(ctx, "bench/seq")
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	reportOps(b)
	fsyncs.report(b)
}

// BenchmarkAcquireReleaseParallel is BenchmarkAcquireRelease from many
// goroutines at once (b.RunParallel), each with its own session and name.
// Raft appends every command waiting at the leader in one batch, so
// concurrent callers share an fsync: entries/fsync shows how many. The
// sub-benchmarks vary the number of goroutines; they share the parent's
// server, which testing starts once (a b.N-style function is re-run for
// every round, a parent of sub-benchmarks only once).
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	c, fsyncs := benchServerCountingFsyncs(b)
	var sessions []*client.Session
	for _, parallelism := range []int{1, 4, 16} {
		goroutines := parallelism * runtime.GOMAXPROCS(0)
		for len(sessions) < goroutines {
			sessions = append(sessions, benchSession(b, c))
		}
		b.Run(fmt.Sprintf("goroutines=%d", goroutines), func(b *testing.B) {
			var next atomic.Int64
			ctx := context.Background()
			b.SetParallelism(parallelism)
			fsyncs.reset(b)
			b.ResetTimer()
			b.RunParallel(func(p *testing.PB) {
				i := int(next.Add(1)) - 1
				acquireReleaseLoop(ctx, b, p, sessions[i], fmt.Sprintf("bench/par/%d", i))
			})
			b.StopTimer()
			reportOps(b)
			fsyncs.report(b)
		})
	}
}

// BenchmarkKeepAlive is a unary KeepAlive of a live session: the leader's
// lessor renews it in memory, nothing goes through raft or to disk. The Go
// client has no unary keepalive call (its Session renews in the
// background), so the generated gRPC client sends it.
func BenchmarkKeepAlive(b *testing.B) {
	srv, c := benchServer(b)
	s := benchSession(b, c)
	ctx := context.Background()
	req := connect.NewRequest(&pb.KeepAliveRequest{LeaseId: s.ID()})
	for b.Loop() {
		if _, err := srv.Client.KeepAlive(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	reportOps(b)
}

// BenchmarkKVPut is a fenced write to the built-in KV with a held lock's
// token: one raft command and its fsync.
func BenchmarkKVPut(b *testing.B) {
	_, c := benchServer(b)
	s := benchSession(b, c)
	ctx := context.Background()
	l, err := s.Acquire(ctx, "bench/kv")
	if err != nil {
		b.Fatal(err)
	}
	value := make([]byte, 128)
	for b.Loop() {
		if err := c.KVPut(ctx, "bench/key", value, l.Token(), false); err != nil {
			b.Fatal(err)
		}
	}
	reportOps(b)
}

// benchStatus reads the status of a held lock.
func benchStatus(b *testing.B, opts ...client.ReadOption) {
	_, c := benchServer(b)
	s := benchSession(b, c)
	ctx := context.Background()
	if _, err := s.Acquire(ctx, "bench/status"); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		info, err := c.Status(ctx, "bench/status", opts...)
		if err != nil {
			b.Fatal(err)
		}
		if info.GetHolder() == nil {
			b.Fatal("status: the lock is not held")
		}
	}
	reportOps(b)
}

// BenchmarkStatusLinearizable is a linearizable Status: the leader confirms
// its leadership (ReadIndex) before reading; no disk write.
func BenchmarkStatusLinearizable(b *testing.B) { benchStatus(b) }

// BenchmarkStatusStale is a stale Status, served from the applied state.
func BenchmarkStatusStale(b *testing.B) { benchStatus(b, client.Stale()) }

// fsyncCounter counts raft log append batches, each one fsync'd write, and
// the entries in them, from the server's leasehold_raft_log_append_entries
// histogram (one observation per batch, of its entry count).
type fsyncCounter struct {
	reg              prometheus.Gatherer
	batches, entries float64 // at the last reset
}

// read returns the batches and entries appended so far.
func (f *fsyncCounter) read(b *testing.B) (batches, entries float64) {
	mfs, err := f.reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "leasehold_raft_log_append_entries" {
			h := mf.GetMetric()[0].GetHistogram()
			return float64(h.GetSampleCount()), h.GetSampleSum()
		}
	}
	b.Fatal("the server exports no leasehold_raft_log_append_entries")
	return 0, 0
}

// benchServerCountingFsyncs is benchServer with an fsyncCounter on the
// server's metrics, counting from now.
func benchServerCountingFsyncs(b *testing.B) (*client.Client, *fsyncCounter) {
	reg := prometheus.NewRegistry()
	_, c := benchServer(b, func(cfg *server.Config) { cfg.Registerer, cfg.Gatherer = reg, reg })
	f := &fsyncCounter{reg: reg}
	f.reset(b)
	return c, f
}

// reset starts counting from now.
func (f *fsyncCounter) reset(b *testing.B) { f.batches, f.entries = f.read(b) }

// report reports entries/fsync (raft log entries per fsync'd append) and
// fsyncs/op since the last reset.
func (f *fsyncCounter) report(b *testing.B) {
	batches, entries := f.read(b)
	batches, entries = batches-f.batches, entries-f.entries
	if batches == 0 {
		return
	}
	b.ReportMetric(entries/batches, "entries/fsync")
	b.ReportMetric(batches/float64(b.N), "fsyncs/op")
}

// acquireReleaseLoop acquires and releases name in s for every iteration
// of p, failing b at the first error.
func acquireReleaseLoop(ctx context.Context, b *testing.B, p *testing.PB, s *client.Session, name string) {
	for p.Next() {
		l, err := s.Acquire(ctx, name)
		if err != nil {
			b.Error(err)
			return
		}
		if err := l.Release(ctx); err != nil {
			b.Error(err)
			return
		}
	}
}
