package server

import (
	"strings"
	"sync"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/internal/fsm"
)

// hub fans applied events out to Watch streams and wakes Acquire calls
// waiting in a queue. publish and restored run on the raft apply goroutine
// and never block, and nothing is dropped silently:
//
//   - a watcher that falls behind by more than its buffer is ended with
//     resource-exhausted; when the node installs a snapshot (the events in
//     between were never applied here) every watcher is ended with
//     resync-required;
//   - a waiter is not sent events: it gets a coalescing wake-up whenever
//     an event concerns its (name, lease) — its own grant or withdrawal, or
//     another request of the same session that replaced it in the queue —
//     and reads the outcome of its wait id from the applied state, which is
//     the truth however many events happened in between.
type hub struct {
	mu       sync.Mutex // protects following
	watchers map[*watcher]struct{}
	waiters  map[waitKey]map[*waiter]struct{}
}

type watcher struct {
	prefix string
	ch     chan fsm.Event
	// ended is closed when the hub dropped the watcher; err says why.
	ended chan struct{}
	err   error // written once before ended is closed
}

type waitKey struct{ name, leaseID string }

// waiter is woken when the outcome of one queued Acquire may be known.
type waiter struct {
	key  waitKey
	wake chan struct{} // buffered, one slot: "re-check the state"
}

const watchBuffer = 1024

func newHub() *hub {
	return &hub{watchers: map[*watcher]struct{}{}, waiters: map[waitKey]map[*waiter]struct{}{}}
}

func (h *hub) watch(prefix string) *watcher {
	w := &watcher{prefix: prefix, ch: make(chan fsm.Event, watchBuffer), ended: make(chan struct{})}
	h.mu.Lock()
	h.watchers[w] = struct{}{}
	h.mu.Unlock()
	return w
}

func (h *hub) unwatch(w *watcher) {
	h.mu.Lock()
	delete(h.watchers, w)
	h.mu.Unlock()
}

// endLocked drops w, telling its stream why.
func (h *hub) endLocked(w *watcher, err error) {
	delete(h.watchers, w)
	w.err = err
	close(w.ended)
}

func (h *hub) wait(name, leaseID string) *waiter {
	w := &waiter{key: waitKey{name, leaseID}, wake: make(chan struct{}, 1)}
	h.mu.Lock()
	if h.waiters[w.key] == nil {
		h.waiters[w.key] = map[*waiter]struct{}{}
	}
	h.waiters[w.key][w] = struct{}{}
	h.mu.Unlock()
	return w
}

func (h *hub) unwait(w *waiter) {
	h.mu.Lock()
	delete(h.waiters[w.key], w)
	if len(h.waiters[w.key]) == 0 {
		delete(h.waiters, w.key)
	}
	h.mu.Unlock()
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default: // a wake-up is already pending; it covers this one
	}
}

func (h *hub) publish(events []fsm.Event) {
	if len(events) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ev := range events {
		for w := range h.watchers {
			if !strings.HasPrefix(ev.Name, w.prefix) {
				continue
			}
			select {
			case w.ch <- ev:
			default:
				h.endLocked(w, api.Errorf(api.CodeResourceExhausted, "watcher fell more than %d events behind; watch again", watchBuffer))
			}
		}
		for w := range h.waiters[waitKey{ev.Name, ev.LeaseID}] {
			w.signal()
		}
	}
}

// restored runs after the node replaced its state with a snapshot: the
// events in between were never applied here. Every watcher is ended with
// resync-required and every waiter re-checks the state.
func (h *hub) restored() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.watchers {
		h.endLocked(w, api.Errorf(api.CodeResyncRequired, "this node installed a snapshot and skipped the events in between; read the state (ls, status) and watch again"))
	}
	for _, ws := range h.waiters {
		for w := range ws {
			w.signal()
		}
	}
}
