package hub

import (
	"sort"

	"github.com/leasehold/leasehold/internal/fsm"
)

// history is the ring of the last events this node applied, in log order,
// so that a Watch can resume from a log index. Events are numbered by a
// sequence (seq) that counts every event ever added; the ring holds
// [head-n, head). floor is the lowest log index whose events are all held:
// it rises when the ring evicts an event and is reset when the node
// installs a snapshot. Not safe for concurrent use: Hub.mu guards it.
type history struct {
	ring  []fsm.Event
	head  uint64 // seq of the next event added
	n     int    // events held
	floor uint64
}

func newHistory(size int) history {
	return history{ring: make([]fsm.Event, size), floor: 1}
}

// oldest is the seq of the oldest event held.
func (h *history) oldest() uint64 { return h.head - uint64(h.n) }

func (h *history) at(seq uint64) fsm.Event { return h.ring[seq%uint64(len(h.ring))] }

func (h *history) add(ev fsm.Event) {
	if h.n == len(h.ring) {
		h.floor = max(h.floor, h.at(h.oldest()).Index+1)
		h.n--
	}
	h.ring[h.head%uint64(len(h.ring))] = ev
	h.head++
	h.n++
}

// seek returns the seq of the first event held whose index is ≥ index
// (head when there is none). Indexes never decrease along the ring.
func (h *history) seek(index uint64) uint64 {
	first := h.oldest()
	return first + uint64(sort.Search(h.n, func(i int) bool { return h.at(first+uint64(i)).Index >= index }))
}

// reset forgets every event: the next ones start at an index not yet known.
func (h *history) reset() {
	clear(h.ring)
	h.n = 0 // head stays: a sequence is never reused
}
