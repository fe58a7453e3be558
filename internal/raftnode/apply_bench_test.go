package raftnode

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// BenchmarkApplyParallel measures the leader's path of a lock operation
// below the RPC layer: Node.Apply of an Acquire and then of its Release
// (one op is the pair), each encoded, proposed, appended to raft-wal and
// fsync'd in a batch with the other goroutines' commands, applied to the
// state machine and waited for. One single-node raft on b.TempDir() with
// the default timings of `leasehold serve`; every goroutine has its own
// session and name, so no command waits on another's lock. The
// sub-benchmarks vary the goroutines; cpu-µs/op is the CPU time of the
// whole test process per pair (raft, the store, the state machine and the
// benchmark's own goroutines), comparable with the server's CPU per pair.
func BenchmarkApplyParallel(b *testing.B) {
	cfg := DefaultConfig()
	cfg.DataDir = b.TempDir()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := n.Close(); err != nil {
			b.Errorf("close: %v", err)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !n.IsLeader() || n.floorPending.Load() {
		if time.Now().After(deadline) {
			b.Fatal("no leader after 10 s")
		}
		<-tick.C
	}
	ctx := context.Background()
	apply := func(b *testing.B, cmd *fsmpb.Command) uint64 {
		res, err := n.Apply(ctx, cmd)
		if err == nil && res.Err != nil {
			err = res.Err
		}
		if err != nil {
			b.Fatalf("apply %v: %v", cmd, err)
		}
		return res.Holding.GetToken()
	}
	sessions := 0
	for _, parallelism := range []int{1, 32} {
		goroutines := parallelism * runtime.GOMAXPROCS(0)
		for ; sessions < goroutines; sessions++ {
			apply(b, create(fmt.Sprintf("bench-%d", sessions), 60_000))
		}
		b.Run(fmt.Sprintf("goroutines=%d", goroutines), func(b *testing.B) {
			var next atomic.Int64
			cpu0 := processCPU(b)
			b.SetParallelism(parallelism)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(p *testing.PB) {
				i := int(next.Add(1)) - 1
				lease, name := fmt.Sprintf("bench-%d", i), fmt.Sprintf("bench/%d", i)
				acq := acquire(name, lease, 0)
				rel := &fsmpb.Command{Op: &fsmpb.Command_Release{Release: &fsmpb.Release{Name: name, LeaseId: lease}}}
				for p.Next() {
					rel.GetRelease().Token = apply(b, acq)
					apply(b, rel)
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// processCPU is the user and system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkLogAppend measures the floor under every acknowledged command:
// one raft-wal append of one encoded Acquire, fsync included, as raft's
// leader makes when a single command is waiting (a contended handoff, or
// any command at C=1). One op is one append; ns/op is its wall time and
// cpu-µs/op the process's CPU for it. The log is in b.TempDir(): point
// TMPDIR at the data dir's file system to measure that disk.
func BenchmarkLogAppend(b *testing.B) {
	store, err := openStore(b.TempDir(), hclog.NewNullLogger())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := store.Close(); err != nil {
			b.Errorf("close: %v", err)
		}
	})
	data, err := proto.Marshal(acquire("bench/0", "bench-0", 0))
	if err != nil {
		b.Fatal(err)
	}
	entry := &raft.Log{Type: raft.LogCommand, Term: 1, Data: data}
	cpu0 := processCPU(b)
	b.ResetTimer()
	for i := range b.N {
		entry.Index = uint64(i) + 1
		if err := store.StoreLog(entry); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}
