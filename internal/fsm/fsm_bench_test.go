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
	m := benchState(b, 10_000)
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
	m := benchState(b, 10_000)
	b.ReportAllocs()
	for b.Loop() {
		_ = m.Capture()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// benchState is n sessions each holding one of n locks.
func benchState(b *testing.B, n int) *Machine {
	m := New(DefaultLimits())
	var index uint64
	for i := range n {
		lease, name := fmt.Sprintf("lease-%06d", i), fmt.Sprintf("bench/lock-%06d", i)
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

// BenchmarkCensus is what a /metrics scrape reads under the state's read
// lock, which every apply waits for, at 100,000 sessions each holding a lock.
func BenchmarkCensus(b *testing.B) {
	m := benchState(b, 100_000)
	b.ReportAllocs()
	for b.Loop() {
		if c := m.Census(); c.Held != 100_000 {
			b.Fatalf("census %+v", c)
		}
	}
}

// BenchmarkListPage lists the first 1,000 of 100,000 locks, as the List
// call's largest page and the dashboard do, under the state's read lock.
func BenchmarkListPage(b *testing.B) {
	m := benchState(b, 100_000)
	b.ReportAllocs()
	for b.Loop() {
		if list, more := m.List("bench/", 1000); len(list) != 1000 || !more {
			b.Fatalf("listed %d, more %v", len(list), more)
		}
	}
}

// BenchmarkSessionPage lists the first 1,000 of 100,000 sessions, as
// ListSessions' largest page and the dashboard do, under the state's read
// lock.
func BenchmarkSessionPage(b *testing.B) {
	m := benchState(b, 100_000)
	b.ReportAllocs()
	for b.Loop() {
		if page, more := m.SessionPage(1000); len(page) != 1000 || !more {
			b.Fatalf("listed %d, more %v", len(page), more)
		}
	}
}

// BenchmarkCloseSessionFullSemaphores is the Apply of one CloseSession that
// frees a slot in each of names full semaphores of 1,000 permits (1,000
// holders each, and one session queued for each): the queued session takes
// the freed slot, the highest, in every name. Finding a free slot costs
// O(log permits); what is left grows with the holders (finding the closed
// session's holding among them), about 10 µs per name here.
func BenchmarkCloseSessionFullSemaphores(b *testing.B) {
	for _, names := range []int{1, 100} {
		b.Run(fmt.Sprint("names=", names), func(b *testing.B) {
			const permitsN = 1000
			m := New(DefaultLimits())
			var index uint64
			apply := func(c *fsmpb.Command) Result {
				index++
				res := m.Apply(index, c)
				if res.Err != nil {
					b.Fatalf("%v: %v", c, res.Err)
				}
				return res
			}
			lease := func(i int) string { return fmt.Sprintf("lease-%06d", i) }
			name := func(j int) string { return fmt.Sprintf("sem-%03d", j) }
			// queue creates session i and queues it for every name.
			queue := func(i int) {
				apply(create(lease(i), "worker"))
				for j := range names {
					apply(acquire(name(j), lease(i), permits(permitsN)))
				}
			}
			for i := range permitsN + 1 {
				queue(i)
			}
			holder := permitsN - 1 // holds the highest slot of every name
			for b.Loop() {
				b.StopTimer()
				if holder > permitsN-1 {
					queue(holder + 1)
				}
				b.StartTimer()
				res := apply(closeSession(lease(holder)))
				if len(res.Released) != names {
					b.Fatalf("released %d names", len(res.Released))
				}
				holder++ // the queued session now holds the highest slot
				if res.Holding.GetSlot() != permitsN-1 {
					b.Fatalf("the queued session took slot %d", res.Holding.GetSlot())
				}
			}
		})
	}
}
