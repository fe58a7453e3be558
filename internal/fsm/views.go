package fsm

// The read-only views the server, the dashboard and /metrics read under
// the state's read lock: none of them changes the Machine.

import (
	"container/heap"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// LockInfo is a read-only view of one lock.
type LockInfo struct {
	Name   string
	Holder *fsmpb.Holding // the first of Holders; nil when free
	Owner  string         // the holder's owner
	// Holders are every holding in grant order, Owners their owners.
	Holders []*fsmpb.Holding
	Owners  []string
	Permits uint32 // 1 for a lock, N for a semaphore
	Waiters []*fsmpb.Waiter
	Delayed bool
	DelayMs int64
	// DelayToken is the token of the expired holding whose lock-delay is in force.
	DelayToken uint64
}

// Lock describes the lock name; a free name has a zero Holder. The result
// is a copy: it stays valid after the caller releases the state.
func (m *Machine) Lock(name string) LockInfo {
	info, _ := m.Head(name)
	if l := m.locks[name]; l != nil {
		info.Waiters = make([]*fsmpb.Waiter, len(l.waiters))
		for i, w := range l.waiters {
			info.Waiters[i] = proto.CloneOf(w)
		}
	}
	return info
}

// Head is Lock without the queue: the holders (copies), their owners and
// the lock-delay, with Waiters nil, and how many sessions are queued. A
// refused TryAcquire names the holder with it, whatever the queue's length.
func (m *Machine) Head(name string) (LockInfo, int) {
	l := m.locks[name]
	if l == nil {
		return LockInfo{Name: name, Permits: 1}, 0
	}
	info := LockInfo{Name: name, Permits: l.permits, Delayed: l.delayToken != 0, DelayMs: l.delayMs, DelayToken: l.delayToken}
	for _, h := range l.holders {
		info.Holders = append(info.Holders, proto.CloneOf(h))
		info.Owners = append(info.Owners, m.sessions[h.LeaseId].pb.Owner)
	}
	if len(info.Holders) > 0 {
		info.Holder, info.Owner = info.Holders[0], info.Owners[0]
	}
	return info, len(l.waiters)
}

// Contention is a name as it refused a TryAcquire: how many hold it and
// wait for it, its first holder, and its lock-delay.
type Contention struct {
	Holders int    // sessions holding the name
	Permits uint32 // 1 for a lock, N for a semaphore
	Waiters int    // sessions queued for it
	// Owner and Token are the first holder's owner label and token.
	Owner string
	Token uint64
	// DelayMs and DelayToken describe the lock-delay in force (DelayToken 0: none).
	DelayMs    int64
	DelayToken uint64
}

// contention describes l for a refused TryAcquire, in O(1).
func (m *Machine) contention(l *lock) *Contention {
	c := &Contention{Holders: len(l.holders), Permits: l.permits, Waiters: len(l.waiters), DelayMs: l.delayMs, DelayToken: l.delayToken}
	if len(l.holders) > 0 {
		c.Owner, c.Token = m.sessions[l.holders[0].LeaseId].pb.Owner, l.holders[0].Token
	}
	return c
}

// Standing is where session leaseID stands at lock name, read without
// copying the lock's queue (Lock copies all of it): its holding (a copy; nil
// when it holds none), whether its wait waitID is queued, and how many
// sessions are queued.
func (m *Machine) Standing(name, leaseID string, waitID uint64) (holding *fsmpb.Holding, waiting bool, waiters int) {
	l := m.locks[name]
	if l == nil {
		return nil, false, 0
	}
	for _, h := range l.holders {
		if h.GetLeaseId() == leaseID {
			holding = proto.CloneOf(h)
			break
		}
	}
	waiting = slices.ContainsFunc(l.waiters, func(w *fsmpb.Waiter) bool { return w.GetLeaseId() == leaseID && w.GetWaitId() == waitID })
	return holding, waiting, len(l.waiters)
}

// List describes up to limit locks whose name has prefix, in name order,
// and reports whether more matched. It copies only the locks it returns and
// sorts only their names, so a short page of a large state stays cheap.
func (m *Machine) List(prefix string, limit int) ([]LockInfo, bool) {
	names, more := firstKeys(m.locks, prefix, limit)
	out := make([]LockInfo, len(names))
	for i, n := range names {
		out[i] = m.Lock(n)
	}
	return out, more
}

// SessionPage returns the first limit live sessions in lease id order, and
// whether more are live; like List, it sorts only the ids it returns.
func (m *Machine) SessionPage(limit int) ([]*fsmpb.Session, bool) {
	ids, more := firstKeys(m.sessions, "", limit)
	out := make([]*fsmpb.Session, len(ids))
	for i, id := range ids {
		out[i] = m.sessions[id].pb
	}
	return out, more
}

// SessionCount is the number of live sessions.
func (m *Machine) SessionCount() int { return len(m.sessions) }

// LockCount is the number of lock names held, queued for or in a lock-delay.
func (m *Machine) LockCount() int { return len(m.locks) }

// firstKeys returns, sorted, the first limit keys of m with prefix, and
// whether more matched.
func firstKeys[V any](m map[string]V, prefix string, limit int) ([]string, bool) {
	return pageKeys(m, prefix, "", nil, limit)
}

// pageKeys returns, sorted, the first limit keys of m that have prefix, sort
// after after and that keep (nil: every key) accepts, and whether more
// matched. Once limit keys are kept they form a heap with the greatest on
// top, which each later key below it replaces: O(n) compares for n keys and
// a short page, where sorting every key took O(n log n).
func pageKeys[V any](m map[string]V, prefix, after string, keep func(string) bool, limit int) ([]string, bool) {
	limit = max(limit, 0)
	kept := make(namesHeap, 0, min(limit, len(m)))
	more := false
	for key := range m {
		switch {
		case !strings.HasPrefix(key, prefix), key <= after && after != "", keep != nil && !keep(key):
		case len(kept) < limit:
			kept = append(kept, key)
			if len(kept) == limit {
				heap.Init(&kept)
			}
		default:
			more = true
			if limit > 0 && key < kept[0] {
				kept[0] = key
				heap.Fix(&kept, 0)
			}
		}
	}
	slices.Sort(kept)
	return kept, more
}

// namesHeap is a max-heap of names (container/heap).
type namesHeap []string

func (h namesHeap) Len() int           { return len(h) }
func (h namesHeap) Less(i, j int) bool { return h[i] > h[j] }
func (h namesHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *namesHeap) Push(x any)        { *h = append(*h, x.(string)) }
func (h *namesHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Census counts the state for monitoring without copying any of it: live
// sessions, locks with at least one holder, queued waiters over all locks,
// and locks in a lock-delay.
type Census struct {
	Sessions, Held, Waiters, Delayed int
}

// Census counts the state (see Census) from running counts: O(1), so a
// scrape holds the state's read lock for no time at any size.
func (m *Machine) Census() Census {
	c := m.counts
	c.Sessions = len(m.sessions)
	return c
}

// tally adds l's share of the Census, times sign (1 or -1). An empty lock
// has none, so a lock created or forgotten by a command needs no care.
func (c *Census) tally(l *lock, sign int) {
	if len(l.holders) > 0 {
		c.Held += sign
	}
	if l.delayToken != 0 {
		c.Delayed += sign
	}
	c.Waiters += sign * len(l.waiters)
}

// recensus computes the running counts from scratch (Restore, and the
// tests that pin them).
func (m *Machine) recensus() Census {
	var c Census
	for _, l := range m.locks {
		c.tally(l, 1)
	}
	return c
}

// Session returns the live session leaseID, or nil.
func (m *Machine) Session(leaseID string) *fsmpb.Session {
	if s, ok := m.sessions[leaseID]; ok {
		return s.pb
	}
	return nil
}

// Sessions returns every live session.
func (m *Machine) Sessions() []*fsmpb.Session {
	out := make([]*fsmpb.Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		out = append(out, s.pb)
	}
	return out
}

// LockDelays returns every lock-delay in force.
func (m *Machine) LockDelays() []LockDelay {
	var out []LockDelay
	for _, l := range m.locks {
		if l.delayToken != 0 {
			out = append(out, LockDelay{Name: l.name, Token: l.delayToken, Ms: l.delayMs})
		}
	}
	return out
}

// Owner returns the owner label of a live session ("" when none).
func (m *Machine) Owner(leaseID string) string {
	if s, ok := m.sessions[leaseID]; ok {
		return s.pb.Owner
	}
	return ""
}

// KV returns the fenced KV entry for key, or nil. A deleted key is a
// tombstone (Deleted set, no value) that keeps the key's fence.
func (m *Machine) KV(key string) *fsmpb.KV { return m.kv[key] }

// Token returns the newest token issued.
func (m *Machine) Token() uint64 { return m.token }

// NodeAPIAddr returns the API address node id registered, or "".
func (m *Machine) NodeAPIAddr(id string) string { return m.nodes[id] }
