package server

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/fsm"
)

// BenchmarkHubPublish is the fan-out of one lock event on raft's apply
// goroutine with watchers registered on prefixes the event does not match,
// each served by a goroutine that, like a Watch stream, takes what the hub
// has for it whenever it is woken. One op is the publish of one event;
// wakeups/op counts the watchers' goroutines that woke for it, and ns/op
// includes their work where it competes for the hub's lock and the cores.
func BenchmarkHubPublish(b *testing.B) {
	for _, watchers := range []int{0, 100, 1000} {
		b.Run(fmt.Sprintf("watchers=%d", watchers), func(b *testing.B) {
			h := newHub(10_000)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var wakeups atomic.Int64
			for i := range watchers {
				w, _, err := h.watch(fmt.Sprintf("other/%d/", i), 0)
				if err != nil {
					b.Fatal(err)
				}
				wg.Go(func() {
					defer h.unwatch(w)
					for {
						for evs, _ := h.next(w, 64); len(evs) != 0; evs, _ = h.next(w, 64) {
						}
						select {
						case <-stop:
							return
						case <-w.ended:
							b.Errorf("watcher ended: %v", w.err)
							return
						case <-w.wake:
							wakeups.Add(1)
						}
					}
				})
			}
			ev := []fsm.Event{{Type: pb.EventType_EVENT_TYPE_ACQUIRED, Name: "bench/name", LeaseID: "l"}}
			var index uint64
			b.ReportAllocs()
			for b.Loop() {
				index++
				ev[0].Index = index
				h.publish(index, ev)
			}
			b.StopTimer()
			close(stop)
			wg.Wait()
			b.ReportMetric(float64(wakeups.Load())/float64(b.N), "wakeups/op")
		})
	}
}
