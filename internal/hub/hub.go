package hub

import (
	"strings"
	"sync"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/internal/fsm"
)

// Hub is one node's event history, watchers and waiters (see the package
// comment). Its methods are safe for concurrent use.
type Hub struct {
	maxLag uint64

	mu sync.Mutex // protects following
	// raftApplied, when set, is raft's applied index: raft counts an entry
	// once it hands it to the state machine, before it is published here.
	raftApplied func() uint64
	hist        history
	applied     uint64 // the highest index published (with or without events)
	pending     bool   // a snapshot was installed and its index is not known yet
	restoredAt  uint64 // applied when the snapshot was installed
	watchers    map[*Watcher]struct{}
	waiters     map[waitKey]map[*Waiter]struct{}
}

// Watcher is one Watch stream's cursor into the history. Its stream takes
// events with Hub.Next whenever Wake fires, until Ended is closed.
type Watcher struct {
	prefix string
	from   uint64        // events below this index are not sent (guarded by Hub.mu)
	wake   chan struct{} // buffered, one slot: "new events"
	// ended is closed when the hub dropped the watcher; err says why.
	ended chan struct{}

	// guarded by Hub.mu
	next uint64 // seq of the next history event to look at
	base uint64 // history head when it registered: a replay before it is no lag
	told uint64 // index of the entry at whose publish it was last woken (or registered)
	err  error  // written once before ended is closed
}

type waitKey struct{ name, leaseID string }

// progressEvery is how many log entries may pass, with events none of
// which a watcher is sent, before it is woken anyway to take the applied
// index it has covered.
const progressEvery = 64

// Waiter is woken when the outcome of one queued Acquire may be known.
type Waiter struct {
	key  waitKey
	wake chan struct{} // buffered, one slot: "re-check the state"
}

// New returns a hub that keeps the last size events; a watcher may lag
// size/2 of them.
func New(size int) *Hub {
	return &Hub{
		maxLag:   uint64(max(size/2, 1)),
		hist:     newHistory(size),
		watchers: map[*Watcher]struct{}{},
		waiters:  map[waitKey]map[*Waiter]struct{}{},
	}
}

// SetRaftApplied tells the hub how to read raft's applied index, which
// raft advances once it hands an entry to the state machine, before the
// entry is published here. f is called under the hub's lock: it must not
// block (an atomic load, as raft.Raft.AppliedIndex).
func (h *Hub) SetRaftApplied(f func() uint64) {
	h.mu.Lock()
	h.raftApplied = f
	h.mu.Unlock()
}

// Watch registers a watcher of prefix from log index from (0: from the next
// event applied) and returns it with the applied index it starts after.
// An index the history does not hold fails with compacted (unavailable
// while a snapshot install's index is not known yet). The caller ends the
// watch with Unwatch.
func (h *Hub) Watch(prefix string, from uint64) (*Watcher, uint64, error) {
	w := &Watcher{prefix: prefix, from: from, wake: make(chan struct{}, 1), ended: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.resolveLocked()
	w.next, w.base = h.hist.head, h.hist.head
	if from != 0 {
		switch {
		case h.pending && from <= h.restoredAt:
			return nil, 0, api.Errorf(api.CodeCompacted, "this node installed a snapshot after index %d; events from index %d are gone: read the state and watch again", h.restoredAt, from)
		case h.pending:
			return nil, 0, api.Errorf(api.CodeUnavailable, "this node is installing a snapshot; try another node or again")
		case from < h.hist.floor:
			return nil, 0, api.Errorf(api.CodeCompacted, "events from index %d are no longer in this node's history (it holds index %d on): read the state and watch again", from, h.hist.floor)
		}
		w.next = h.hist.seek(from)
	}
	h.watchers[w] = struct{}{}
	w.told = h.applied
	if from != 0 {
		return w, from - 1, nil // nothing sent yet
	}
	// From now: raft may count entries (its own among them) that are not
	// published yet; they are before now.
	start := h.applied
	if h.raftApplied != nil {
		start = max(start, h.raftApplied())
	}
	w.from = start + 1
	return w, start, nil
}

// resolveLocked learns the floor after a snapshot install from raft's
// applied index once raft counts the snapshot: every entry after it is
// published here. The floor it picks may be above the snapshot's index (raft
// counts entries before they are published), which only refuses more.
func (h *Hub) resolveLocked() {
	if !h.pending || h.raftApplied == nil {
		return
	}
	if a := h.raftApplied(); a > h.restoredAt {
		h.pending = false
		h.hist.floor = a + 1
		h.applied = max(h.applied, a)
	}
}

// Unwatch drops w; it may already have been ended.
func (h *Hub) Unwatch(w *Watcher) {
	h.mu.Lock()
	delete(h.watchers, w)
	h.mu.Unlock()
}

// endLocked drops w, telling its stream why.
func (h *Hub) endLocked(w *Watcher, err error) {
	delete(h.watchers, w)
	w.err = err
	close(w.ended)
}

// Next returns up to limit events for w after those it already took, and
// when it has taken every event published, the applied index its stream
// has now covered (0 otherwise). It returns nothing for a watcher the hub
// ended.
func (h *Hub) Next(w *Watcher, limit int) (evs []fsm.Event, covered uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.next < h.hist.oldest() {
		return nil, 0 // ended by publish with compacted
	}
	for ; w.next < h.hist.head && len(evs) < limit; w.next++ {
		ev := h.hist.at(w.next)
		if w.sends(ev) {
			evs = append(evs, ev)
		}
	}
	if w.next == h.hist.head {
		covered = h.applied
	}
	return evs, covered
}

// Wait registers a waiter for the queued request of session leaseID on
// name. It is woken when an event concerns (name, leaseID), when another
// request of the same session and name registers (it replaced this one in
// the queue) and when the node installs a snapshot. The caller ends the
// wait with Unwait.
func (h *Hub) Wait(name, leaseID string) *Waiter {
	w := &Waiter{key: waitKey{name, leaseID}, wake: make(chan struct{}, 1)}
	h.mu.Lock()
	if h.waiters[w.key] == nil {
		h.waiters[w.key] = map[*Waiter]struct{}{}
	}
	// A session has one queued request per name: a newer one (another wait
	// id) replaced the others in the state, so they look again now and end
	// instead of waiting out their deadlines (unbounded handlers otherwise).
	for other := range h.waiters[w.key] {
		other.Signal()
	}
	h.waiters[w.key][w] = struct{}{}
	h.mu.Unlock()
	return w
}

// Unwait drops w.
func (h *Hub) Unwait(w *Waiter) {
	h.mu.Lock()
	delete(h.waiters[w.key], w)
	if len(h.waiters[w.key]) == 0 {
		delete(h.waiters, w.key)
	}
	h.mu.Unlock()
}

// Signal wakes w (the caller's own first look at the state, say). A
// wake-up already pending covers it.
func (w *Waiter) Signal() {
	select {
	case w.wake <- struct{}{}:
	default: // a wake-up is already pending; it covers this one
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default: // a wake-up is already pending; it covers this one
	}
}

// Publish records the events of the entry at index (none for most
// entries), wakes the watchers sent any of them and the waiters they
// concern, and ends the watchers that fell too far behind. It runs on
// raft's apply goroutine, for every entry in log order, and never blocks.
func (h *Hub) Publish(index uint64, events []fsm.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pending {
		// The first entry after a snapshot: the history starts here.
		h.pending = false
		h.hist.floor = index
	}
	h.applied = max(h.applied, index)
	if len(events) == 0 {
		return
	}
	before := h.hist.head
	for _, ev := range events {
		h.hist.add(ev)
		for w := range h.waiters[waitKey{ev.Name, ev.LeaseID}] {
			w.Signal()
		}
	}
	for w := range h.watchers {
		switch {
		case w.next < h.hist.oldest():
			h.endLocked(w, api.Errorf(api.CodeCompacted, "the events this watch was replaying are no longer in the history: read the state and watch again"))
		case w.next == before && !w.wants(events) && index-w.told < progressEvery:
			// It had taken every event and is sent none of these: what
			// next would do, without waking its stream.
			w.next = h.hist.head
		case h.hist.head-max(w.next, w.base) > h.maxLag:
			h.endLocked(w, api.Errorf(api.CodeResourceExhausted, "watcher fell more than %d events behind; resume from the index after the last event received", h.maxLag))
		default:
			w.told = index
			signal(w.wake)
		}
	}
}

// sends reports whether ev is for w's stream (guarded by Hub.mu: reads
// w.from).
func (w *Watcher) sends(ev fsm.Event) bool {
	return ev.Index >= w.from && strings.HasPrefix(ev.Name, w.prefix)
}

// wants reports whether w's stream is sent any of events (guarded by
// Hub.mu).
func (w *Watcher) wants(events []fsm.Event) bool {
	for _, ev := range events {
		if w.sends(ev) {
			return true
		}
	}
	return false
}

// Restored runs after the node replaced its state with a snapshot at log
// index at (0 when not known): the events in between were never applied
// here. The history is emptied, every watcher is ended with compacted and
// every waiter re-checks the state. With at known, the history starts at
// at+1; else at the first entry published after it.
func (h *Hub) Restored(at uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.watchers {
		h.endLocked(w, api.Errorf(api.CodeCompacted, "this node installed a snapshot and skipped the events in between; read the state (ls, status) and watch again"))
	}
	h.hist.reset()
	if at != 0 {
		h.pending = false
		h.hist.floor = at + 1
		h.applied = max(h.applied, at)
	} else {
		h.pending, h.restoredAt = true, h.applied
	}
	for _, ws := range h.waiters {
		for w := range ws {
			w.Signal()
		}
	}
}

// Watchers is the number of open watchers.
func (h *Hub) Watchers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.watchers)
}

// Wake receives when there may be new events for w: call Next until it
// returns none, then wait again. Wake-ups coalesce.
func (w *Watcher) Wake() <-chan struct{} { return w.wake }

// Ended is closed when the hub dropped w (it fell behind, its replay was
// overtaken, or the node installed a snapshot); Err then says why.
func (w *Watcher) Ended() <-chan struct{} { return w.ended }

// Err is why the hub ended w (resource-exhausted or compacted); it is set
// once Ended is closed, nil before.
func (w *Watcher) Err() error {
	select {
	case <-w.ended:
		return w.err
	default:
		return nil
	}
}

// Wake receives when the outcome of w's request may have changed: read it
// from the applied state. Wake-ups coalesce.
func (w *Waiter) Wake() <-chan struct{} { return w.wake }
