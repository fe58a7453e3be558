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
//   - every event goes into a bounded history (history.go); a watcher is a
//     cursor into it, so a Watch can start at a log index (replay, then
//     live, in one sequence: no gap, no duplicate);
//   - a watcher that falls more than maxLag events behind the events
//     published since it registered is ended with resource-exhausted while
//     the events after the last one it sent are still held, so that it can
//     resume from there; a Watch from an index the history no longer holds,
//     or whose replay the history overtook, fails with compacted;
//   - when the node installs a snapshot (the events in between were never
//     applied here) the history is emptied and every watcher is ended with
//     compacted;
//   - a stream ended with compacted first sends the prefix's state at an
//     index (watchstate.go), from which the caller resumes;
//   - a watcher is woken only by an event it will be sent (its prefix, at
//     or after its start); events of other prefixes that arrive while it
//     has taken everything move its cursor past them in publish, without
//     waking it, so a lock event costs the watchers of other names no
//     goroutine wake-up and no scan. Such a watcher is still woken once
//     the log has moved progressEvery entries past its last wake-up, so
//     the applied index its stream reports (progress notifications) stays
//     that close to the node's;
//   - a waiter is not sent events: it gets a coalescing wake-up whenever
//     an event concerns its (name, lease) — its own grant or withdrawal, or
//     another request of the same session that replaced it in the queue —
//     and reads the outcome of its wait id from the applied state, which is
//     the truth however many events happened in between.
type hub struct {
	maxLag uint64

	mu sync.Mutex // protects following
	// raftApplied, when set, is raft's applied index: raft counts an entry
	// once it hands it to the state machine, before it is published here.
	raftApplied func() uint64
	hist        history
	applied     uint64 // the highest index published (with or without events)
	pending     bool   // a snapshot was installed and its index is not known yet
	restoredAt  uint64 // applied when the snapshot was installed
	watchers    map[*watcher]struct{}
	waiters     map[waitKey]map[*waiter]struct{}
}

type watcher struct {
	prefix string
	from   uint64        // events below this index are not sent (guarded by hub.mu)
	wake   chan struct{} // buffered, one slot: "new events"
	// ended is closed when the hub dropped the watcher; err says why.
	ended chan struct{}

	// guarded by hub.mu
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

// waiter is woken when the outcome of one queued Acquire may be known.
type waiter struct {
	key  waitKey
	wake chan struct{} // buffered, one slot: "re-check the state"
}

// newHub keeps the last size events; a watcher may lag size/2 of them.
func newHub(size int) *hub {
	return &hub{
		maxLag:   uint64(max(size/2, 1)),
		hist:     newHistory(size),
		watchers: map[*watcher]struct{}{},
		waiters:  map[waitKey]map[*waiter]struct{}{},
	}
}

// watch registers a watcher of prefix from log index from (0: from the next
// event applied) and returns it with the applied index it starts after.
// An index the history does not hold fails with compacted.
func (h *hub) watch(prefix string, from uint64) (*watcher, uint64, error) {
	w := &watcher{prefix: prefix, from: from, wake: make(chan struct{}, 1), ended: make(chan struct{})}
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
func (h *hub) resolveLocked() {
	if !h.pending || h.raftApplied == nil {
		return
	}
	if a := h.raftApplied(); a > h.restoredAt {
		h.pending = false
		h.hist.floor = a + 1
		h.applied = max(h.applied, a)
	}
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

// next returns up to limit events for w after those it already took, and
// when it has taken every event published, the applied index its stream
// has now covered (0 otherwise).
func (h *hub) next(w *watcher, limit int) (evs []fsm.Event, covered uint64) {
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

func (h *hub) wait(name, leaseID string) *waiter {
	w := &waiter{key: waitKey{name, leaseID}, wake: make(chan struct{}, 1)}
	h.mu.Lock()
	if h.waiters[w.key] == nil {
		h.waiters[w.key] = map[*waiter]struct{}{}
	}
	// A session has one queued request per name: a newer one (another wait
	// id) replaced the others in the state, so they look again now and end
	// instead of waiting out their deadlines (unbounded handlers otherwise).
	for other := range h.waiters[w.key] {
		other.signal()
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

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default: // a wake-up is already pending; it covers this one
	}
}

// publish records the events of the entry at index (none for most entries).
func (h *hub) publish(index uint64, events []fsm.Event) {
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
			w.signal()
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

// sends reports whether ev is for w's stream (guarded by hub.mu: reads
// w.from).
func (w *watcher) sends(ev fsm.Event) bool {
	return ev.Index >= w.from && strings.HasPrefix(ev.Name, w.prefix)
}

// wants reports whether w's stream is sent any of events (guarded by
// hub.mu).
func (w *watcher) wants(events []fsm.Event) bool {
	for _, ev := range events {
		if w.sends(ev) {
			return true
		}
	}
	return false
}

// restored runs after the node replaced its state with a snapshot at log
// index at (0 when not known): the events in between were never applied
// here. The history is emptied, every watcher is ended with compacted and
// every waiter re-checks the state. With at known, the history starts at
// at+1; else at the first entry published after it.
func (h *hub) restored(at uint64) {
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
			w.signal()
		}
	}
}
