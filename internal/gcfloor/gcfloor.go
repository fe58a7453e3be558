// Package gcfloor keeps Go's garbage collector from running while the heap
// is small.
//
// The collector starts a cycle when the heap has grown by GOGC percent
// (100) of what the last one found live, and not before 4 MiB. A server
// whose live heap is a few MiB but which allocates for every request (a
// lock node under load: protobuf messages, raft log entries, futures)
// then collects many times a second, each cycle costing CPU in the
// background workers and in the allocating goroutines' assists. With a
// floor, the heap may grow to the floor before a collection; once the live
// heap is large enough that GOGC alone lets it grow past the floor, GOGC
// is left as it was.
package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// minHeap is the Go runtime's minimum heap goal at GOGC=100; it scales
// with GOGC, so a GOGC of p never lets the goal fall below minHeap·p/100.
const minHeap = 4 << 20

// Start raises GOGC after every collection so that the next one starts when
// the heap reaches about floor bytes, and never lowers it below the value
// in force when Start was called (base). It returns a function that stops
// this and sets GOGC back to base. A floor of 0, or a base that turns the
// collector off (GOGC=off), starts nothing.
//
// After a cycle that found live bytes live (plus scannable stacks and
// globals, which GOGC counts too), GOGC becomes
//
//	max(base, (floor − live) · 100 / (live + stacks + globals))
//
// capped at floor·100/4 MiB, where the runtime's own minimum heap goal
// reaches the floor.
func Start(floor uint64) (stop func()) {
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	if floor == 0 || base < 0 {
		return func() {}
	}
	t := &tuner{floor: floor, base: base}
	t.arm()
	t.adjust()
	return func() {
		t.stopped.Store(true)
		debug.SetGCPercent(base)
	}
}

type tuner struct {
	floor   uint64
	base    int
	stopped atomic.Bool
}

// sentinel is garbage from its birth: its finalizer runs after the next
// collection, adjusts GOGC and arms a new one. It holds a pointer so that
// it is not a tiny allocation (those share blocks and may outlive a cycle).
type sentinel struct{ _ *int }

func (t *tuner) arm() {
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) {
		if t.stopped.Load() {
			return
		}
		t.adjust()
		t.arm()
	})
}

// adjust sets GOGC from the last collection.
func (t *tuner) adjust() {
	samples := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/scan/stack:bytes"},
		{Name: "/gc/scan/globals:bytes"},
	}
	metrics.Read(samples)
	debug.SetGCPercent(Percent(t.floor, t.base, samples[0].Value.Uint64(), samples[1].Value.Uint64()+samples[2].Value.Uint64()))
}

// Percent is the GOGC that Start sets after a collection that found live
// heap bytes and scan bytes of stacks and globals.
func Percent(floor uint64, base int, live, scan uint64) int {
	limit := floor * 100 / minHeap
	p := uint64(0)
	switch counted := live + scan; {
	case live >= floor:
	case counted == 0: // no collection yet
		p = limit
	default:
		p = min((floor-live)*100/counted, limit)
	}
	return max(base, int(p))
}
