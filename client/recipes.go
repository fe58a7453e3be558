package client

import (
	"fmt"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
)

// Recipes are modes of the server's one FIFO queue per name, so every grant
// of every recipe carries its own fencing token:
//
//   - a lock (the default): one holder;
//   - a read/write lock: Shared() readers hold together, an exclusive
//     writer alone; a queued writer blocks every later reader, and its
//     token is above every reader's granted before it;
//   - a semaphore: WithPermits(n) lets n sessions hold the name at once,
//     each in its own slot (Lock.Slot) with its own token;
//   - an election (election.go): a lock whose holding carries a value.

// WithPermits makes the name a semaphore of n permits (n ≤ 1000): up to n
// sessions hold it at once, the others wait in FIFO order. Every request
// for a name must carry the same n while anyone holds or waits for it;
// another n fails with ErrInvalidArgument naming the current one.
func WithPermits(n uint32) AcquireOption {
	return func(o *acquireOptions) { o.permits = n }
}

// Shared asks for a read lock: shared holders hold the name together, and
// an exclusive (default) request is the write lock. It cannot be combined
// with WithPermits.
func Shared() AcquireOption {
	return func(o *acquireOptions) { o.mode = pb.LockMode_LOCK_MODE_SHARED }
}

// withValue sets the value the holding carries (Campaign).
func withValue(v []byte) AcquireOption {
	return func(o *acquireOptions) { o.value = v }
}

// Slot returns the permit the holding occupies: 0..n-1 for a semaphore of
// n permits (the lowest free one at grant), 0 otherwise.
func (l *Lock) Slot() uint32 { return l.h.holding.GetSlot() }

// SlotKey is the key under which a semaphore holder fences its own slot:
// the resource keeps one last token per slot, so the late holder of slot k
// is refused once the slot's next holder wrote. A plain lock's holders
// fence the name itself.
func (l *Lock) SlotKey() string { return SlotKey(l.Name(), l.Slot()) }

// SlotKey is the fenced key of slot k of the semaphore name: NAME/slot/K.
func SlotKey(name string, k uint32) string { return fmt.Sprintf("%s/slot/%d", name, k) }
