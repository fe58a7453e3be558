package hub

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/fsm"
)

// BenchmarkHubPublish is the fan-out of one lock event on raft's apply
// goroutine with watchers registered on prefixes the event does not match,
// each served by a goroutine that, like a Watch stream, takes what the hub
// has for it whenever it is woken. One op is the publish of one event;
// wakeups/op counts the watchers' goroutines that woke for it, and
// cpu-µs/op is the process's CPU per op, theirs included. Saturated, events
// are published back to back (the watchers' wake-ups coalesce); paced,
// each op also waits until every watcher has taken what it was woken for,
// as when events arrive slower than the streams take them.
func BenchmarkHubPublish(b *testing.B) {
	for _, bc := range []struct {
		watchers int
		paced    bool
	}{{0, false}, {100, false}, {1000, false}, {100, true}, {1000, true}} {
		name := fmt.Sprintf("watchers=%d/saturated", bc.watchers)
		if bc.paced {
			name = fmt.Sprintf("watchers=%d/paced", bc.watchers)
		}
		watchers := bc.watchers
		b.Run(name, func(b *testing.B) {
			h := New(10_000)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var wakeups atomic.Int64
			for i := range watchers {
				w, _, err := h.Watch(fmt.Sprintf("other/%d/", i), 0)
				if err != nil {
					b.Fatal(err)
				}
				wg.Go(func() {
					defer h.Unwatch(w)
					for {
						for evs, _ := h.Next(w, 64); len(evs) != 0; evs, _ = h.Next(w, 64) {
						}
						select {
						case <-stop:
							return
						case <-w.Ended():
							b.Errorf("watcher ended: %v", w.Err())
							return
						case <-w.Wake():
							wakeups.Add(1)
						}
					}
				})
			}
			ev := []fsm.Event{{Type: pb.EventType_EVENT_TYPE_ACQUIRED, Name: "bench/name", LeaseID: "l"}}
			var index uint64
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				index++
				ev[0].Index = index
				h.Publish(index, ev)
				for bc.paced && !caughtUp(h) {
					runtime.Gosched()
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
			close(stop)
			wg.Wait()
			b.ReportMetric(float64(wakeups.Load())/float64(b.N), "wakeups/op")
		})
	}
}

// caughtUp reports whether every watcher has taken every event published
// and has no wake-up pending.
func caughtUp(h *Hub) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.watchers {
		if w.next != h.hist.head || len(w.wake) != 0 {
			return false
		}
	}
	return true
}

// processCPU is the user and system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
