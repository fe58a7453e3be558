package fsm

import (
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// BenchmarkApplyAcquireRelease measures the state machine alone: one op is
// an Acquire of a free name and the Release of the grant (two Applies), the
// pair every short critical section costs each node of a cluster.
func BenchmarkApplyAcquireRelease(b *testing.B) {
	m := New(DefaultLimits())
	var index uint64
	apply := func(c *fsmpb.Command) Result {
		index++
		return m.Apply(index, c)
	}
	if res := apply(create("bench-lease", "bench")); res.Err != nil {
		b.Fatalf("create session: %v", res.Err)
	}
	acq := acquire("bench/name", "bench-lease")
	rel := release("bench/name", "bench-lease", 0)
	b.ReportAllocs()
	for b.Loop() {
		res := apply(acq)
		if res.Err != nil || res.Holding == nil {
			b.Fatalf("acquire: holding %v, err %v", res.Holding, res.Err)
		}
		// Apply keeps no reference to the command, so one is reused.
		rel.GetRelease().Token = res.Holding.GetToken()
		if res := apply(rel); res.Err != nil {
			b.Fatalf("release: %v", res.Err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkSnapshot encodes a state of 10,000 sessions each holding one of
// 10,000 locks into a snapshot stream: the whole cost of raft's snapshot of
// a busy node, most of it paid without the state machine's lock (see
// BenchmarkCapture for the locked part).
func BenchmarkSnapshot(b *testing.B) {
	m := benchState(b)
	data, err := m.Snapshot()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Snapshot(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	b.ReportMetric(float64(len(data)), "snapshot-bytes")
}

// BenchmarkCapture is the part of a snapshot paid under the state
// machine's lock: capturing a view of the same state as BenchmarkSnapshot.
func BenchmarkCapture(b *testing.B) {
	m := benchState(b)
	b.ReportAllocs()
	for b.Loop() {
		_ = m.Capture()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// benchState is 10,000 sessions each holding one of 10,000 locks.
func benchState(b *testing.B) *Machine {
	const n = 10_000
	m := New(DefaultLimits())
	var index uint64
	for i := range n {
		lease, name := fmt.Sprintf("lease-%05d", i), fmt.Sprintf("bench/lock-%05d", i)
		index++
		if res := m.Apply(index, create(lease, "worker-"+lease)); res.Err != nil {
			b.Fatalf("create session %d: %v", i, res.Err)
		}
		index++
		if res := m.Apply(index, acquire(name, lease)); res.Err != nil || res.Holding == nil {
			b.Fatalf("acquire %d: holding %v, err %v", i, res.Holding, res.Err)
		}
	}
	return m
}
