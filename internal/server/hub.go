package server

import (
	"strings"
	"sync"

	leaseholdv1 "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/fsm"
)

// hub fans applied events out to Watch streams and to Acquire calls
// waiting in a queue. publish runs on the raft apply goroutine and never
// blocks: a watcher that falls behind by more than its buffer is dropped
// (its stream ends with resource-exhausted), a waiter's channel is a
// one-slot signal.
type hub struct {
	mu       sync.Mutex // protects following
	watchers map[*watcher]struct{}
	waiters  map[waitKey]map[*waiter]struct{}
}

type watcher struct {
	prefix string
	ch     chan fsm.Event
	// lagged is closed when the watcher was dropped for falling behind.
	lagged chan struct{}
}

type waitKey struct{ name, leaseID string }

// waiter learns the outcome of one queued Acquire.
type waiter struct {
	ch chan fsm.Event // ACQUIRED or DEQUEUED/EXPIRED for (name, lease); buffered
}

const watchBuffer = 1024

func newHub() *hub {
	return &hub{watchers: map[*watcher]struct{}{}, waiters: map[waitKey]map[*waiter]struct{}{}}
}

func (h *hub) watch(prefix string) *watcher {
	w := &watcher{prefix: prefix, ch: make(chan fsm.Event, watchBuffer), lagged: make(chan struct{})}
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

func (h *hub) wait(name, leaseID string) *waiter {
	w := &waiter{ch: make(chan fsm.Event, 4)}
	k := waitKey{name, leaseID}
	h.mu.Lock()
	if h.waiters[k] == nil {
		h.waiters[k] = map[*waiter]struct{}{}
	}
	h.waiters[k][w] = struct{}{}
	h.mu.Unlock()
	return w
}

func (h *hub) unwait(name, leaseID string, w *waiter) {
	k := waitKey{name, leaseID}
	h.mu.Lock()
	delete(h.waiters[k], w)
	if len(h.waiters[k]) == 0 {
		delete(h.waiters, k)
	}
	h.mu.Unlock()
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
				delete(h.watchers, w)
				close(w.lagged)
			}
		}
		switch ev.Type {
		case leaseholdv1.EventType_EVENT_TYPE_ACQUIRED, leaseholdv1.EventType_EVENT_TYPE_DEQUEUED:
			for w := range h.waiters[waitKey{ev.Name, ev.LeaseID}] {
				select {
				case w.ch <- ev:
				default: // the waiter already has an outcome to act on
				}
			}
		}
	}
}
