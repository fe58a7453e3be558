// Package fsm is leasehold's deterministic state machine: sessions, lock
// holdings, a FIFO wait queue per name, the global token counter, lock-delay
// and the built-in fenced KV.
//
// Every node of a cluster applies the same Raft log to a Machine and must
// reach the same state, so a Machine reads no clock, does no I/O and starts
// no goroutine. Time arrives only as values inside commands (Command.unix_ms,
// for display), and every decision that depends on time — a session's expiry,
// the end of a lock-delay — is made by the leader's lessor and arrives here
// as its own command (Expire, EndLockDelay).
//
//	           Acquire                 Release / Close / Expire
//	client ───────────────► [holder] ─────────────────────────► next waiter
//	           (queue if held)   │                                (same entry)
//	                             │ Expire with lock_delay_ms > 0
//	                             ▼
//	                        [delayed] ── EndLockDelay(token) ──► next waiter
//
// Invariants (pinned by the tests of this package):
//
//  1. A name has at most one holding at any moment of the applied state,
//     unless its mode allows more (modes.go): shared holders and no
//     exclusive one, or at most permits holders in distinct slots.
//  2. Every grant takes token = ++counter, so tokens strictly increase across
//     all names, survive snapshot and restore, and are never reused.
//  3. Release succeeds only when (name, lease_id, token) is the current
//     holding; otherwise ErrNotHolder and nothing changes.
//  4. A fenced KV write with token t on key k is accepted iff t >= last(k)
//     (t > last(k) when strict); check and write are one Apply.
//  5. A released or expired lock passes to the head of its queue in the same
//     Apply, so no other command can slip between them.
//  6. The state's accounted size (quota.go) never grows past
//     Limits.MaxStateBytes; commands that do not grow it are never refused
//     for it.
//  7. A deleted KV key keeps its last token as a tombstone, so the fence of
//     invariant 4 survives the delete.
//
// A business refusal (not-holder, stale token, ...) is a value in
// Result.Err. A command this package does not know is a bug: Apply panics.
package fsm

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"google.golang.org/protobuf/proto"

	leaseholdv1 "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// Limits bound the state. Every node of a cluster must use the same Limits:
// they are enforced inside Apply, so they are part of the determinism.
type Limits struct {
	MaxSessions        int // live sessions
	MaxLocksPerSession int // names a session holds or waits for
	MaxWaitersPerName  int // queued sessions per name
	MaxKVKeys          int // keys in the fenced KV, tombstones included
	// MaxStateBytes bounds the state's accounted size (see quota.go); a
	// command that would grow it past the bound is refused with a
	// *QuotaError. 0 means no bound.
	MaxStateBytes int64
}

// DefaultLimits are the limits the server uses.
func DefaultLimits() Limits {
	return Limits{
		MaxSessions:        100_000,
		MaxLocksPerSession: 1_000,
		MaxWaitersPerName:  1_000,
		MaxKVKeys:          1_000_000,
		MaxStateBytes:      DefaultMaxStateBytes,
	}
}

// Machine is the state machine. It is not safe for concurrent use; the
// caller (raftnode) serializes Apply, Snapshot, Restore and reads.
type Machine struct {
	limits   Limits
	token    uint64
	sessions map[string]*session
	locks    map[string]*lock
	kv       map[string]*fsmpb.KV
	nodes    map[string]string // node id → API address
	auth     authState         // auth.go

	// bytes is the accounted size of the state (see quota.go).
	bytes int64
	// counts is the running Census of the locks (its Sessions unused):
	// every command that changes a lock takes the lock's share out before
	// and puts it back after (Census.tally).
	counts Census
	// The grant clock (see floor.go): the newest grant stamp, the second
	// being counted and its grants, and the most grants in one second.
	lastGrantMs int64
	rateSecond  int64
	rateCount   uint64
	peakRate    uint64
}

type session struct {
	pb    *fsmpb.Session
	locks map[string]struct{} // names held or waited for
}

type lock struct {
	name string
	// holders are the holdings in grant order (see modes.go): at most one
	// unless the name is shared or has permits > 1.
	holders    []*fsmpb.Holding
	permits    uint32   // >= 1
	slots      *slotSet // a semaphore's free slots (modes.go); nil until needed
	waiters    []*fsmpb.Waiter
	delayToken uint64
	delayMs    int64
}

func (l *lock) empty() bool { return len(l.holders) == 0 && len(l.waiters) == 0 && l.delayToken == 0 }

// New returns an empty Machine.
func New(limits Limits) *Machine {
	return &Machine{
		limits:   limits,
		sessions: map[string]*session{},
		locks:    map[string]*lock{},
		kv:       map[string]*fsmpb.KV{},
		nodes:    map[string]string{},
	}
}

// Event is one change to a lock, as Watch reports it.
type Event struct {
	Type    leaseholdv1.EventType
	Name    string
	LeaseID string
	Owner   string
	Token   uint64
	Index   uint64
	UnixMs  int64
	// WaitID is the queue entry an ACQUIRED or DEQUEUED event concerns
	// (Acquire.wait_id; 0 for a grant made at once to a request without one).
	WaitID uint64
	// Value is the holding's value, for ACQUIRED and PROCLAIMED.
	Value string
}

// LockDelay is a lock-delay that began in this Apply; the lessor ends it with
// EndLockDelay{Name, Token} once Ms have passed.
type LockDelay struct {
	Name  string
	Token uint64
	Ms    int64
}

// Result is what one Apply did.
type Result struct {
	// Err is a business refusal; the state did not change.
	Err error
	// Session is the session created (CreateSession) or acting (Acquire).
	Session *fsmpb.Session
	// Holding is the grant of Acquire (Queued false), or the grant made from
	// the queue by Release.
	Holding *fsmpb.Holding
	// Queued is true when Acquire put the session in the name's queue.
	Queued bool
	// Contention is, with ErrLocked or ErrLockDelay, the name as it refused
	// the TryAcquire: what the refusal tells its caller (views.go).
	Contention *Contention
	// Released lists the names a CloseSession or Expire freed.
	Released []string
	// KV is the entry a KVPut wrote.
	KV *fsmpb.KV
	// EndedSessions lists sessions this Apply removed (close or expiry).
	EndedSessions []string
	// LockDelays lists lock-delays that began.
	LockDelays []LockDelay
	// Events are the lock events, in order.
	Events []Event
	// Auth is the recompiled auth state after an auth command (auth.go).
	Auth *auth.Policies
}

// applyCtx carries what one Apply needs besides the command.
type applyCtx struct {
	index  uint64
	unixMs int64
	res    *Result
}

func (a *applyCtx) event(t leaseholdv1.EventType, name, leaseID, owner string, token uint64) {
	a.waitEvent(t, name, leaseID, owner, token, 0)
}

func (a *applyCtx) waitEvent(t leaseholdv1.EventType, name, leaseID, owner string, token, waitID uint64) {
	a.res.Events = append(a.res.Events, Event{Type: t, Name: name, LeaseID: leaseID, Owner: owner, Token: token, Index: a.index, UnixMs: a.unixMs, WaitID: waitID})
}

// maxBumpToken caps BumpToken: a bump to the top of uint64 would make the next
// grant wrap the counter to 0 and reissue every token. The cap leaves 2^63
// grants of headroom.
const maxBumpToken = math.MaxInt64

// Apply applies the command of log entry index.
func (m *Machine) Apply(index uint64, cmd *fsmpb.Command) Result {
	var res Result
	a := &applyCtx{index: index, unixMs: cmd.GetUnixMs(), res: &res}
	switch op := cmd.GetOp().(type) {
	case *fsmpb.Command_CreateSession:
		m.createSession(a, op.CreateSession)
	case *fsmpb.Command_CloseSession:
		m.endSession(a, op.CloseSession.GetLeaseId(), false)
	case *fsmpb.Command_Expire:
		m.endSession(a, op.Expire.GetLeaseId(), true)
	case *fsmpb.Command_Acquire:
		m.acquire(a, op.Acquire)
	case *fsmpb.Command_CancelWait:
		m.cancelWait(a, op.CancelWait, false)
	case *fsmpb.Command_Withdraw:
		m.cancelWait(a, op.Withdraw, true)
	case *fsmpb.Command_Release:
		m.release(a, op.Release)
	case *fsmpb.Command_EndLockDelay:
		m.endLockDelay(a, op.EndLockDelay)
	case *fsmpb.Command_KvPut:
		m.kvPut(op.KvPut, &res)
	case *fsmpb.Command_KvDelete:
		m.kvDelete(op.KvDelete, &res)
	case *fsmpb.Command_RegisterNode:
		m.registerNode(op.RegisterNode)
	case *fsmpb.Command_BumpToken:
		res.Err = m.raiseFloor(a, op.BumpToken.GetMin())
	case *fsmpb.Command_TokenFloor:
		m.tokenFloor(a, op.TokenFloor)
	case *fsmpb.Command_AuthEnable, *fsmpb.Command_AuthPutPolicy, *fsmpb.Command_AuthDeletePolicy, *fsmpb.Command_AuthPutToken, *fsmpb.Command_AuthRevokeToken:
		m.applyAuth(a, cmd)
	case *fsmpb.Command_Proclaim:
		m.proclaim(a, op.Proclaim)
	case *fsmpb.Command_Checkpoint:
		m.checkpoint(op.Checkpoint)
	default:
		panic(fmt.Sprintf("fsm: unknown command %T at index %d", op, index))
	}
	// Every applied stamped command tells when the state was current:
	// tokens a lost history issued after a copy of this state came after
	// it (see the grant clock in floor.go). A refusal changes nothing.
	if res.Err == nil {
		m.lastGrantMs = max(m.lastGrantMs, a.unixMs)
	}
	if res.Holding != nil {
		// The state keeps mutating its holding (a re-entrant Acquire clears
		// WaitId); the caller reads the result after the state is released.
		res.Holding = proto.CloneOf(res.Holding)
	}
	afterApply(m, index, &res)
	return res
}

func (m *Machine) createSession(a *applyCtx, c *fsmpb.CreateSession) {
	if _, ok := m.sessions[c.GetLeaseId()]; ok {
		a.res.Err = ErrSessionExists
		return
	}
	if len(m.sessions) >= m.limits.MaxSessions {
		a.res.Err = ErrTooManySessions
		return
	}
	s := &session{
		pb:    &fsmpb.Session{LeaseId: c.GetLeaseId(), Owner: c.GetOwner(), TtlMs: c.GetTtlMs(), CreatedUnixMs: a.unixMs, Sequencers: c.GetSequencers(), Principal: c.GetPrincipal()},
		locks: map[string]struct{}{},
	}
	if err := m.reserve(sessionBytes(s.pb)); err != nil {
		a.res.Err = err
		return
	}
	m.bytes += sessionBytes(s.pb)
	m.sessions[s.pb.LeaseId] = s
	a.res.Session = s.pb
}

// endSession removes a session, frees what it held and withdraws its queue
// entries. On expiry, holdings acquired with a lock-delay put their name in
// lock-delay instead of passing it on.
func (m *Machine) endSession(a *applyCtx, leaseID string, expired bool) {
	s, ok := m.sessions[leaseID]
	if !ok {
		a.res.Err = ErrSessionNotFound
		return
	}
	delete(m.sessions, leaseID)
	a.res.EndedSessions = append(a.res.EndedSessions, leaseID)
	m.bytes -= sessionBytes(s.pb)
	names := make([]string, 0, len(s.locks))
	for name := range s.locks {
		names = append(names, name)
		m.bytes -= entryBytes(name, leaseID)
	}
	sort.Strings(names) // map order must not leak into the log's effects
	for _, name := range names {
		l := m.locks[name]
		m.counts.tally(l, -1)
		if i := l.holderIndex(leaseID); i >= 0 {
			h := l.removeHolder(i)
			m.bytes -= int64(len(h.GetValue()))
			a.res.Released = append(a.res.Released, name)
			if expired {
				a.event(leaseholdv1.EventType_EVENT_TYPE_EXPIRED, name, leaseID, s.pb.Owner, h.Token)
				if h.LockDelayMs > 0 {
					// On a shared or semaphore name a delay may be in
					// force already. It began earlier, so restarting the
					// longer of the two lengths now ends no earlier than
					// either: the name's delay is never shortened, and the
					// earlier delay's EndLockDelay no longer matches.
					ms := max(h.LockDelayMs, l.delayMs)
					l.delayToken, l.delayMs = h.Token, ms
					a.res.LockDelays = append(a.res.LockDelays, LockDelay{Name: name, Token: h.Token, Ms: ms})
				}
			} else {
				a.event(leaseholdv1.EventType_EVENT_TYPE_RELEASED, name, leaseID, s.pb.Owner, h.Token)
			}
		} else {
			m.bytes -= l.valueBytes(leaseID)
			waitID := withdrawWait(l, leaseID)
			a.waitEvent(leaseholdv1.EventType_EVENT_TYPE_DEQUEUED, name, leaseID, s.pb.Owner, 0, waitID)
		}
		m.grantNext(a, l)
		m.counts.tally(l, 1)
	}
}

func (m *Machine) acquire(a *applyCtx, c *fsmpb.Acquire) {
	s, ok := m.sessions[c.GetLeaseId()]
	if !ok {
		a.res.Err = ErrSessionNotFound
		return
	}
	a.res.Session = s.pb
	if id := c.GetWaitId(); id != 0 && slices.Contains(s.pb.GetWithdrawnWaitIds(), id) {
		a.res.Err = ErrWithdrawn
		return
	}
	name := c.GetName()
	l := m.locks[name]
	if err := checkMode(l, c); err != nil {
		a.res.Err = err
		return
	}
	if l == nil {
		l = &lock{name: name, permits: permitsOf(c.GetPermits())}
	}
	m.counts.tally(l, -1)
	defer m.counts.tally(l, 1)
	// A session holds a name at most once: acquiring what it already holds
	// in the same mode and with the same value (a retry whose answer was
	// lost, or a re-entrant acquire) returns the same holding; another mode
	// or value is refused (repeats). Only the request that created a
	// holding may withdraw it (CancelWait): once another request of the
	// session learned it too, no withdrawal releases it.
	if i := retryOf(l, s.pb.LeaseId); i >= 0 {
		h := l.holders[i]
		if err := repeats(l.name, false, h.GetMode(), h.GetValue(), c); err != nil {
			a.res.Err = err
			return
		}
		if id := withdrawableBy(h.GetWaitId(), c.GetWaitId()); id != h.GetWaitId() {
			// Copy on write: a snapshot being written may share the old record.
			h = proto.CloneOf(h)
			h.WaitId = id
			l.holders[i] = h
		}
		a.res.Holding = h
		return
	}
	if i := slices.IndexFunc(l.waiters, func(w *fsmpb.Waiter) bool { return w.LeaseId == s.pb.LeaseId }); i >= 0 {
		if err := repeats(l.name, true, l.waiters[i].GetMode(), l.waiters[i].GetValue(), c); err != nil {
			a.res.Err = err
			return
		}
		if c.GetTry() {
			a.res.Err, a.res.Contention = ErrLocked, m.contention(l)
			return
		}
		w := proto.CloneOf(l.waiters[i])
		w.WaitId = c.GetWaitId()
		w.LockDelayMs = c.GetLockDelayMs()
		l.waiters[i] = w
		a.res.Queued = true
		return
	}
	if len(s.locks) >= m.limits.MaxLocksPerSession {
		a.res.Err = ErrTooManyLocks
		return
	}
	need := entryBytes(name, s.pb.LeaseId) + int64(len(c.GetValue()))
	if l.empty() {
		need += lockBytes(name)
	}
	if err := m.reserve(need); err != nil {
		a.res.Err = err
		return
	}
	if l.empty() {
		m.bytes += need
		m.locks[name] = l
		s.locks[name] = struct{}{}
		a.res.Holding = m.grant(a, l, s, c.GetMode(), c.GetLockDelayMs(), c.GetWaitId(), c.GetValue())
		return
	}
	if len(l.waiters) == 0 && l.delayToken == 0 && l.fits(c.GetMode()) {
		m.bytes += need
		s.locks[name] = struct{}{}
		a.res.Holding = m.grant(a, l, s, c.GetMode(), c.GetLockDelayMs(), c.GetWaitId(), c.GetValue())
		return
	}
	switch {
	case c.GetTry() && len(l.holders) == 0 && l.delayToken != 0:
		a.res.Err, a.res.Contention = ErrLockDelay, m.contention(l)
		return
	case c.GetTry():
		a.res.Err, a.res.Contention = ErrLocked, m.contention(l)
		return
	case len(l.waiters) >= m.limits.MaxWaitersPerName:
		a.res.Err = ErrTooManyWaiters
		return
	}
	m.bytes += need
	l.waiters = append(l.waiters, &fsmpb.Waiter{LeaseId: s.pb.LeaseId, LockDelayMs: c.GetLockDelayMs(), WaitId: c.GetWaitId(), QueuedUnixMs: a.unixMs, Mode: c.GetMode(), Value: c.GetValue()})
	s.locks[name] = struct{}{}
	a.res.Queued = true
	a.event(leaseholdv1.EventType_EVENT_TYPE_QUEUED, name, s.pb.LeaseId, s.pb.Owner, 0)
}

// grant adds s to the holders of l, which has room for mode, with the next
// token and the lowest free slot.
func (m *Machine) grant(a *applyCtx, l *lock, s *session, mode fsmpb.Mode, lockDelayMs int64, waitID uint64, value []byte) *fsmpb.Holding {
	token := nextToken(m, l.name)
	m.noteGrant(a.unixMs)
	h := &fsmpb.Holding{LeaseId: s.pb.LeaseId, Token: token, AcquiredUnixMs: a.unixMs, LockDelayMs: lockDelayMs, WaitId: waitID, Mode: mode, Slot: l.takeSlot(mode), Value: value}
	l.holders = append(l.holders, h)
	a.waitEvent(leaseholdv1.EventType_EVENT_TYPE_ACQUIRED, l.name, s.pb.LeaseId, s.pb.Owner, token, waitID)
	a.res.Events[len(a.res.Events)-1].Value = string(value)
	return h
}

// grantNext grants an undelayed lock to the head of its queue, and to the
// next head, while they fit beside the holders (several readers or permits
// at once); then it forgets a lock that is left with nothing.
func (m *Machine) grantNext(a *applyCtx, l *lock) {
	for l.delayToken == 0 && len(l.waiters) > 0 && l.fits(l.waiters[0].GetMode()) {
		w := l.waiters[0]
		l.waiters = l.waiters[1:]
		// Every queued session is live: ending a session removes its waiters.
		a.res.Holding = m.grant(a, l, m.sessions[w.LeaseId], w.GetMode(), w.LockDelayMs, w.WaitId, w.GetValue())
	}
	if l.empty() {
		delete(m.locks, l.name)
		m.bytes -= lockBytes(l.name)
	}
}

// cancelWait withdraws the wait c names; remember (a withdraw command)
// also records its wait id in the session.
func (m *Machine) cancelWait(a *applyCtx, c *fsmpb.CancelWait, remember bool) {
	l := m.locks[c.GetName()]
	s := m.sessions[c.GetLeaseId()]
	if s == nil || c.GetWaitId() == 0 {
		return
	}
	if remember {
		m.rememberWithdrawn(s, c.GetWaitId())
	}
	if l == nil {
		return
	}
	m.counts.tally(l, -1)
	defer m.counts.tally(l, 1)
	if i := slices.IndexFunc(l.waiters, func(w *fsmpb.Waiter) bool {
		return w.LeaseId == c.GetLeaseId() && w.WaitId == c.GetWaitId()
	}); i >= 0 {
		m.bytes -= entryBytes(l.name, s.pb.LeaseId) + int64(len(l.waiters[i].GetValue()))
		l.waiters = slices.Delete(l.waiters, i, i+1)
		delete(s.locks, l.name)
		a.waitEvent(leaseholdv1.EventType_EVENT_TYPE_DEQUEUED, l.name, s.pb.LeaseId, s.pb.Owner, 0, c.GetWaitId())
		m.grantNext(a, l)
		return
	}
	// Granted after the requester gave up: nobody learned the token, so the
	// holding is released rather than left to expire. A holding that
	// another request of the session learned has WaitId 0 (acquire), which
	// no withdrawal names.
	if i := l.holderIndex(c.GetLeaseId()); i >= 0 && l.holders[i].WaitId == c.GetWaitId() {
		m.releaseHolder(a, l, s, i)
	}
}

// maxWithdrawn is how many withdrawn wait ids a session remembers. A
// client withdraws a request only after giving up on it, and sends its
// next one with a new wait id: a request delayed past more than 16 later
// withdrawals of its session is beyond what a network holds back.
const maxWithdrawn = 16

// rememberWithdrawn records that the wait id of s was withdrawn, so that
// an Acquire with it applied later is refused (ErrWithdrawn). The record
// is replaced, not modified (a snapshot being written may share it), and
// its few bytes are counted without a quota check: a withdrawal never
// fails.
func (m *Machine) rememberWithdrawn(s *session, waitID uint64) {
	ids := s.pb.GetWithdrawnWaitIds()
	if slices.Contains(ids, waitID) {
		return
	}
	pb := proto.CloneOf(s.pb)
	pb.WithdrawnWaitIds = append(ids[max(0, len(ids)-maxWithdrawn+1):len(ids):len(ids)], waitID)
	m.bytes += sessionBytes(pb) - sessionBytes(s.pb)
	s.pb = pb
}

func (m *Machine) release(a *applyCtx, c *fsmpb.Release) {
	l, s, i, ok := m.holding(c.GetName(), c.GetLeaseId(), c.GetToken())
	if !ok {
		a.res.Err = ErrNotHolder
		return
	}
	m.counts.tally(l, -1)
	m.releaseHolder(a, l, s, i)
	m.counts.tally(l, 1)
}

// holding finds the holding (name, leaseID, token): its lock, its session
// and its index among the lock's holders.
func (m *Machine) holding(name, leaseID string, token uint64) (*lock, *session, int, bool) {
	l := m.locks[name]
	s := m.sessions[leaseID]
	if l == nil || s == nil {
		return nil, nil, 0, false
	}
	i := l.holderIndex(leaseID)
	if i < 0 || !holdingMatches(l.holders[i].GetToken(), token) {
		return nil, nil, 0, false
	}
	return l, s, i, true
}

// releaseHolder ends l.holders[i], which s holds.
func (m *Machine) releaseHolder(a *applyCtx, l *lock, s *session, i int) {
	h := l.removeHolder(i)
	a.event(leaseholdv1.EventType_EVENT_TYPE_RELEASED, l.name, s.pb.LeaseId, s.pb.Owner, h.Token)
	delete(s.locks, l.name)
	m.bytes -= entryBytes(l.name, s.pb.LeaseId) + int64(len(h.GetValue()))
	m.grantNext(a, l)
}

func (m *Machine) endLockDelay(a *applyCtx, c *fsmpb.EndLockDelay) {
	l := m.locks[c.GetName()]
	if l == nil || l.delayToken == 0 || l.delayToken != c.GetToken() {
		return
	}
	m.counts.tally(l, -1)
	defer m.counts.tally(l, 1)
	l.delayToken, l.delayMs = 0, 0
	a.event(leaseholdv1.EventType_EVENT_TYPE_LOCK_DELAY_ENDED, l.name, "", "", c.GetToken())
	m.grantNext(a, l)
}

// registerNode records a node's API address. It is never refused by the
// quota: a cluster must be able to learn its members when the state is full.
func (m *Machine) registerNode(c *fsmpb.RegisterNode) {
	if old, ok := m.nodes[c.GetId()]; ok {
		m.bytes -= nodeBytes(c.GetId(), old)
	}
	m.bytes += nodeBytes(c.GetId(), c.GetApiAddr())
	m.nodes[c.GetId()] = c.GetApiAddr()
}
