package fsm

import (
	"bytes"
	"container/heap"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	leaseholdv1 "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// Modes of one queue. A name's lock has a small set of holders and one FIFO
// queue; what may hold it together is decided here, and nowhere else:
//
//	permits 1, exclusive   at most one holder (the mutex; the default)
//	permits 1, shared      any number of shared holders and no exclusive one
//	                       (a read/write lock: readers shared, the writer exclusive)
//	permits N > 1          at most N exclusive holders, each in its own slot
//	                       0..N-1, the lowest free one (a semaphore)
//
// Every grant takes token = ++counter, so a writer's token is greater than
// that of every reader granted before it. The queue is strict FIFO: a request
// is granted at once only when nobody waits and it fits beside the holders,
// and the queue's head is granted (and after it the next, while they fit)
// whenever a holding ends. A queued writer therefore blocks every later
// reader, and nobody starves.
//
// A request for a name that exists must carry the name's permits; a shared
// request carries permits 1. An election is an exclusive lock whose holding
// carries a value that Proclaim changes.

// MaxPermits bounds the permits of a semaphore.
const MaxPermits = 1_000

// PermitsError refuses a request whose permits differ from the name's.
type PermitsError struct {
	Name    string
	Permits uint32 // the name's current permits
	Asked   uint32
}

func (e *PermitsError) Error() string {
	return fmt.Sprintf("fsm: %q has %d permits, the request asked for %d", e.Name, e.Permits, e.Asked)
}

// Unwrap makes errors.Is(err, ErrInvalidMode) true.
func (e *PermitsError) Unwrap() error { return ErrInvalidMode }

func permitsOf(n uint32) uint32 { return max(n, 1) }

// MismatchError refuses an Acquire by a session that already holds or waits
// for the name in another mode, or with another value: modes never mix
// within one session's standing, and a request only repeats one that
// matches it. There is no upgrade: the session releases the name (or stops
// waiting) first, and its next request queues like any other.
type MismatchError struct {
	Name   string
	Queued bool       // the session waits for the name rather than holds it
	Mode   fsmpb.Mode // the mode it holds or waits in
	Asked  fsmpb.Mode
	// Value is true when the modes agree and the values differ.
	Value bool
}

func (e *MismatchError) Error() string {
	standing, undo := "held", "release it first"
	if e.Queued {
		standing, undo = "queued for", "withdraw that request first"
	}
	if e.Value {
		if !e.Queued {
			undo = "Proclaim changes a held value, or release it first"
		}
		return fmt.Sprintf("fsm: %q is already %s by this session with another value; %s", e.Name, standing, undo)
	}
	return fmt.Sprintf("fsm: %q is already %s %s by this session, the request asked for it %s; %s",
		e.Name, standing, modeWord(e.Mode), modeWord(e.Asked), undo)
}

// Unwrap makes errors.Is(err, ErrInvalidMode) true.
func (e *MismatchError) Unwrap() error { return ErrInvalidMode }

func modeWord(m fsmpb.Mode) string {
	if m == fsmpb.Mode_MODE_SHARED {
		return "shared"
	}
	return "exclusive"
}

// repeats returns nil when c asks for what the session's holding (or queue
// entry, when queued) of name already is: the same mode and the same value.
// Permits were checked against the name by checkMode, and a session holds
// at most one slot, so mode and value are all that can differ.
func repeats(name string, queued bool, mode fsmpb.Mode, value []byte, c *fsmpb.Acquire) error {
	switch {
	case !sameMode(mode, c.GetMode()):
		return &MismatchError{Name: name, Queued: queued, Mode: mode, Asked: c.GetMode()}
	case !bytes.Equal(c.GetValue(), value):
		return &MismatchError{Name: name, Queued: queued, Mode: mode, Asked: c.GetMode(), Value: true}
	}
	return nil
}

// checkMode validates a request's mode against itself and the lock l (nil or
// empty when the name is free).
func checkMode(l *lock, c *fsmpb.Acquire) error {
	n := permitsOf(c.GetPermits())
	if n > MaxPermits {
		return fmt.Errorf("%w: %d permits, at most %d", ErrInvalidMode, n, MaxPermits)
	}
	if err := modeErr(c.GetMode(), n); err != nil {
		return err
	}
	if l != nil && !l.empty() && n != l.permits {
		return &PermitsError{Name: l.name, Permits: l.permits, Asked: n}
	}
	return nil
}

// modeErr refuses a mode that is unknown, or shared on a name of more than
// one permit: for a request (checkMode) and for a restored holder or waiter
// (validateModes) alike.
func modeErr(mode fsmpb.Mode, permits uint32) error {
	switch {
	case mode != fsmpb.Mode_MODE_EXCLUSIVE && mode != fsmpb.Mode_MODE_SHARED:
		return fmt.Errorf("%w: unknown mode %d", ErrInvalidMode, mode)
	case mode == fsmpb.Mode_MODE_SHARED && permits > 1:
		return fmt.Errorf("%w: a shared request cannot carry %d permits", ErrInvalidMode, permits)
	}
	return nil
}

// fits reports whether a request of mode may hold l beside its holders.
func (l *lock) fits(mode fsmpb.Mode) bool {
	for _, h := range l.holders {
		if h.GetMode() != mode || mode == fsmpb.Mode_MODE_EXCLUSIVE && l.permits == 1 {
			return false
		}
	}
	return mode == fsmpb.Mode_MODE_SHARED || len(l.holders) < int(l.permits)
}

// holderIndex returns the index of leaseID's holding, or -1.
func (l *lock) holderIndex(leaseID string) int {
	return slices.IndexFunc(l.holders, func(h *fsmpb.Holding) bool { return h.GetLeaseId() == leaseID })
}

// valueBytes is the size of the value leaseID's holding or queue entry carries.
func (l *lock) valueBytes(leaseID string) int64 {
	if i := l.holderIndex(leaseID); i >= 0 {
		return int64(len(l.holders[i].GetValue()))
	}
	if i := slices.IndexFunc(l.waiters, func(w *fsmpb.Waiter) bool { return w.GetLeaseId() == leaseID }); i >= 0 {
		return int64(len(l.waiters[i].GetValue()))
	}
	return 0
}

// takeSlot returns the slot of a new holding of mode, the lowest no holder
// occupies, and marks it taken; shared holders all share slot 0. The caller
// adds the holding to l.holders.
func (l *lock) takeSlot(mode fsmpb.Mode) uint32 {
	if mode == fsmpb.Mode_MODE_SHARED || l.permits == 1 {
		return 0
	}
	if l.slots == nil {
		l.slots = newSlotSet(l.holders)
	}
	return l.slots.take()
}

// removeHolder removes l.holders[i], frees its slot and returns it.
func (l *lock) removeHolder(i int) *fsmpb.Holding {
	h := l.holders[i]
	l.holders = slices.Delete(l.holders, i, i+1)
	if l.slots != nil {
		l.slots.put(h.GetSlot())
	}
	return h
}

// slotSet is the free slots of a semaphore: every slot at or above next,
// and the slots below next in free, a min-heap. Taking the lowest free slot
// and freeing one are O(log permits) inside Apply, where scanning the slots
// against the holders was O(permits × holders). It is not part of the
// snapshot: the first grant after a restore builds it from the holders
// (newSlotSet), so every node takes the same slot.
type slotSet struct {
	next uint32
	free slotHeap
}

// newSlotSet returns the free slots of a semaphore held by holders.
func newSlotSet(holders []*fsmpb.Holding) *slotSet {
	s := &slotSet{}
	used := make(map[uint32]bool, len(holders))
	for _, h := range holders {
		used[h.GetSlot()] = true
		s.next = max(s.next, h.GetSlot()+1)
	}
	for k := range s.next {
		if !used[k] {
			s.free = append(s.free, k) // ascending: already a heap
		}
	}
	return s
}

func (s *slotSet) take() uint32 {
	if len(s.free) > 0 {
		return heap.Pop(&s.free).(uint32)
	}
	s.next++
	return s.next - 1
}

func (s *slotSet) put(k uint32) {
	if k+1 == s.next {
		s.next--
		return
	}
	heap.Push(&s.free, k)
}

// slotHeap is a min-heap of slots (container/heap).
type slotHeap []uint32

func (h slotHeap) Len() int           { return len(h) }
func (h slotHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h slotHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *slotHeap) Push(x any)        { *h = append(*h, x.(uint32)) }
func (h *slotHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// proclaim changes the value of a holding without ending it.
func (m *Machine) proclaim(a *applyCtx, c *fsmpb.Proclaim) {
	l, s, i, ok := m.holding(c.GetName(), c.GetLeaseId(), c.GetToken())
	if !ok {
		a.res.Err = ErrNotHolder
		return
	}
	grow := int64(len(c.GetValue()) - len(l.holders[i].GetValue()))
	if grow > 0 {
		if err := m.reserve(grow); err != nil {
			a.res.Err = err
			return
		}
	}
	m.bytes += grow
	// Copy on write: a snapshot being written may share the old record.
	h := proto.CloneOf(l.holders[i])
	h.Value = c.GetValue()
	l.holders[i] = h
	a.res.Holding = h
	a.event(leaseholdv1.EventType_EVENT_TYPE_PROCLAIMED, l.name, s.pb.LeaseId, s.pb.Owner, h.Token)
	a.res.Events[len(a.res.Events)-1].Value = string(h.Value)
}

// validateModes checks the mode invariants of a restored lock: every
// holder and waiter has a mode a request may have (modeErr), and the
// holders fit together.
func validateModes(l *lock) error {
	for _, w := range l.waiters {
		if err := modeErr(w.GetMode(), l.permits); err != nil {
			return fmt.Errorf("fsm: decode snapshot: lock %q, waiter %q: %w", l.name, w.GetLeaseId(), err)
		}
	}
	exclusive := 0
	slots := map[uint32]bool{}
	for _, h := range l.holders {
		if err := modeErr(h.GetMode(), l.permits); err != nil {
			return fmt.Errorf("fsm: decode snapshot: lock %q, holder %q: %w", l.name, h.GetLeaseId(), err)
		}
		if h.GetMode() == fsmpb.Mode_MODE_SHARED {
			if h.GetSlot() != 0 {
				return fmt.Errorf("fsm: decode snapshot: lock %q has a shared holder in slot %d", l.name, h.GetSlot())
			}
			continue
		}
		exclusive++
		if h.GetSlot() >= l.permits || slots[h.GetSlot()] {
			return fmt.Errorf("fsm: decode snapshot: lock %q has slot %d twice or beyond its %d permits", l.name, h.GetSlot(), l.permits)
		}
		slots[h.GetSlot()] = true
	}
	switch {
	case l.permits > MaxPermits:
		return fmt.Errorf("fsm: decode snapshot: lock %q has %d permits", l.name, l.permits)
	case exclusive > 0 && exclusive < len(l.holders):
		return fmt.Errorf("fsm: decode snapshot: lock %q has shared and exclusive holders", l.name)
	case len(l.holders) > int(max(l.permits, 1)) && exclusive > 0:
		return fmt.Errorf("fsm: decode snapshot: lock %q has %d holders for %d permits", l.name, len(l.holders), l.permits)
	case l.delayToken != 0 && exclusive > 0 && l.permits == 1:
		return fmt.Errorf("fsm: decode snapshot: lock %q is held and in lock-delay", l.name)
	case l.empty():
		return fmt.Errorf("fsm: decode snapshot: lock %q is free but kept, with 0 waiters", l.name)
	case l.delayToken == 0 && len(l.waiters) > 0 && l.fits(l.waiters[0].GetMode()):
		// The queue's head is granted in the Apply that frees room for it.
		return fmt.Errorf("fsm: decode snapshot: lock %q is free but kept, with %d waiters", l.name, len(l.waiters))
	}
	return nil
}

// SessionNames returns the names the session leaseID holds or waits for, in
// order (nil for a session that does not exist).
func (m *Machine) SessionNames(leaseID string) []string {
	s, ok := m.sessions[leaseID]
	if !ok {
		return nil
	}
	out := make([]string, 0, len(s.locks))
	for name := range s.locks {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}
