package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	leaseholdv1 "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// Command builders: one line per command keeps the tables short.

type cmds = []*fsmpb.Command

// sessions creates a session per id, owned by "worker-"+id.
func sessions(ids ...string) cmds {
	var out cmds
	for _, id := range ids {
		out = append(out, create(id, "worker-"+id))
	}
	return out
}

// at stamps cmd with the proposing leader's clock, for display only.
func at(ms int64, cmd *fsmpb.Command) *fsmpb.Command {
	cmd.UnixMs = ms
	return cmd
}

func create(lease, owner string) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_CreateSession{CreateSession: &fsmpb.CreateSession{LeaseId: lease, Owner: owner, TtlMs: 5000}}}
}

func closeSession(lease string) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_CloseSession{CloseSession: &fsmpb.CloseSession{LeaseId: lease}}}
}

func expire(lease string) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_Expire{Expire: &fsmpb.Expire{LeaseId: lease}}}
}

// acqOpt modifies an Acquire; see try, delay and waitID.
type acqOpt func(*fsmpb.Acquire)

func try() acqOpt             { return func(a *fsmpb.Acquire) { a.Try = true } }
func delay(ms int64) acqOpt   { return func(a *fsmpb.Acquire) { a.LockDelayMs = ms } }
func waitID(id uint64) acqOpt { return func(a *fsmpb.Acquire) { a.WaitId = id } }

func acquire(name, lease string, opts ...acqOpt) *fsmpb.Command {
	a := &fsmpb.Acquire{Name: name, LeaseId: lease}
	for _, o := range opts {
		o(a)
	}
	return &fsmpb.Command{Op: &fsmpb.Command_Acquire{Acquire: a}}
}

func cancelWait(name, lease string, id uint64) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_Withdraw{Withdraw: &fsmpb.CancelWait{Name: name, LeaseId: lease, WaitId: id}}}
}

func release(name, lease string, token uint64) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_Release{Release: &fsmpb.Release{Name: name, LeaseId: lease, Token: token}}}
}

func endDelay(name string, token uint64) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_EndLockDelay{EndLockDelay: &fsmpb.EndLockDelay{Name: name, Token: token}}}
}

func kvPut(key, value string, token uint64) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_KvPut{KvPut: &fsmpb.KVPut{Key: key, Value: []byte(value), Token: token}}}
}

func kvPutStrict(key, value string, token uint64) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_KvPut{KvPut: &fsmpb.KVPut{Key: key, Value: []byte(value), Token: token, Strict: true}}}
}

func registerNode(id, addr string) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_RegisterNode{RegisterNode: &fsmpb.RegisterNode{Id: id, ApiAddr: addr}}}
}

func kvDelete(key string, token uint64) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_KvDelete{KvDelete: &fsmpb.KVDelete{Key: key, Token: token}}}
}

func kvDeleteStrict(key string, token uint64) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_KvDelete{KvDelete: &fsmpb.KVDelete{Key: key, Token: token, Strict: true}}}
}

func floor(min uint64, dropSessions bool) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_TokenFloor{TokenFloor: &fsmpb.TokenFloor{Min: min, DropSessions: dropSessions}}}
}

func bump(min uint64) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_BumpToken{BumpToken: &fsmpb.BumpToken{Min: min}}}
}

// rig applies commands to a Machine with increasing log indexes and checks
// after every Apply what must hold after any Apply: the state is consistent,
// new grants take tokens above every earlier one, and a refusal changed
// nothing.
type rig struct {
	t      testing.TB
	m      *Machine
	index  uint64
	tokens tokenWatch
}

func newRig(t testing.TB, limits Limits) *rig {
	t.Helper()
	return &rig{t: t, m: New(limits)}
}

func (r *rig) apply(cmd *fsmpb.Command) Result {
	r.t.Helper()
	before := r.snapshot()
	r.index++
	res := r.m.Apply(r.index, cmd)
	if err := r.tokens.observe(r.m, res); err != nil {
		r.t.Fatalf("apply %v: %v", cmd, err)
	}
	if err := consistent(r.m); err != nil {
		r.t.Fatalf("apply %v: inconsistent state: %v", cmd, err)
	}
	if res.Err != nil && !bytes.Equal(before, r.snapshot()) {
		r.t.Fatalf("apply %v: refused with %v but the state changed", cmd, res.Err)
	}
	return res
}

// must applies cmd and fails the test on a business refusal.
func (r *rig) must(cmds ...*fsmpb.Command) Result {
	r.t.Helper()
	var res Result
	for _, cmd := range cmds {
		if res = r.apply(cmd); res.Err != nil {
			r.t.Fatalf("apply %v: %v", cmd, res.Err)
		}
	}
	return res
}

func (r *rig) snapshot() []byte {
	r.t.Helper()
	b, err := r.m.Snapshot()
	if err != nil {
		r.t.Fatalf("Snapshot: %v", err)
	}
	return b
}

// holder returns the (lease, token) holding name, or ("", 0).
func (r *rig) holder(name string) (string, uint64) {
	h := r.m.Lock(name).Holder
	if h == nil {
		return "", 0
	}
	return h.GetLeaseId(), h.GetToken()
}

// waiters returns the lease ids queued for name, head first.
func (r *rig) waiters(name string) []string {
	var out []string
	for _, w := range r.m.Lock(name).Waiters {
		out = append(out, w.GetLeaseId())
	}
	return out
}

// tokenWatch checks invariant 2 across a sequence of Applies: every grant's
// token is above every token seen before, and the counter never goes down.
type tokenWatch struct {
	maxGranted uint64
	counter    uint64
}

func (w *tokenWatch) observe(m *Machine, res Result) error {
	for _, e := range res.Events {
		if e.Type != leaseholdv1.EventType_EVENT_TYPE_ACQUIRED {
			continue
		}
		if e.Token <= w.maxGranted || e.Token <= w.counter {
			return fmt.Errorf("grant of %q with token %d, but token %d (counter %d) came before", e.Name, e.Token, w.maxGranted, w.counter)
		}
		w.maxGranted = e.Token
	}
	if res.Holding != nil && res.Holding.GetToken() > m.Token() {
		return fmt.Errorf("holding token %d above counter %d", res.Holding.GetToken(), m.Token())
	}
	if m.Token() < w.counter {
		return fmt.Errorf("token counter went down from %d to %d", w.counter, m.Token())
	}
	w.counter = m.Token()
	return nil
}

// consistent reports the first broken invariant of m's state, reading the
// internals: at most one holder per name (by construction: one holder field
// per lock, one lock per name), every holder and waiter is a live session
// appearing once per lock, each session's index of names matches the locks,
// a free undelayed lock has no waiters (it passes on in the same Apply), no
// lock is kept empty, and every token in the state is nonzero, issued
// (<= counter) and, for holdings, never used twice.
func consistent(m *Machine) error {
	if got, want := m.bytes, m.recount(); got != want {
		return fmt.Errorf("accounted size %d bytes, recount %d", got, want)
	}
	if got, want := m.counts, m.recensus(); got != want {
		return fmt.Errorf("running census %+v, counted %+v", got, want)
	}
	names := map[string][]string{} // lease id → names it holds or waits for
	tokens := map[uint64]string{}
	for key, l := range m.locks {
		if key != l.name {
			return fmt.Errorf("lock %q stored under %q", l.name, key)
		}
		if l.empty() {
			return fmt.Errorf("lock %q is empty but kept", key)
		}
		seen := map[string]bool{}
		if err := validateModes(l); err != nil {
			return err
		}
		if l.slots != nil {
			// The kept free slots take the same slot as ones rebuilt from
			// the holders, as after a restore.
			got, want := &slotSet{next: l.slots.next, free: slices.Clone(l.slots.free)}, newSlotSet(l.holders)
			if got.take() != want.take() {
				return fmt.Errorf("lock %q: free slots %+v, rebuilt from the holders %+v", key, l.slots, want)
			}
		}
		for _, h := range l.holders {
			if m.sessions[h.GetLeaseId()] == nil {
				return fmt.Errorf("lock %q held by dead session %q", key, h.GetLeaseId())
			}
			if h.GetToken() == 0 || h.GetToken() > m.token {
				return fmt.Errorf("lock %q held with token %d, counter %d", key, h.GetToken(), m.token)
			}
			if other, dup := tokens[h.GetToken()]; dup {
				return fmt.Errorf("token %d used by %q and %q", h.GetToken(), other, key)
			}
			tokens[h.GetToken()] = key
			seen[h.GetLeaseId()] = true
			names[h.GetLeaseId()] = append(names[h.GetLeaseId()], key)
		}
		if l.delayToken != 0 {
			if l.delayToken > m.token {
				return fmt.Errorf("lock %q delayed by token %d, counter %d", key, l.delayToken, m.token)
			}
			if other, dup := tokens[l.delayToken]; dup {
				return fmt.Errorf("token %d used by %q and %q", l.delayToken, other, key)
			}
			tokens[l.delayToken] = key
		}
		for _, w := range l.waiters {
			if m.sessions[w.GetLeaseId()] == nil {
				return fmt.Errorf("lock %q has dead waiter %q", key, w.GetLeaseId())
			}
			if seen[w.GetLeaseId()] {
				return fmt.Errorf("session %q appears twice in lock %q", w.GetLeaseId(), key)
			}
			seen[w.GetLeaseId()] = true
			names[w.GetLeaseId()] = append(names[w.GetLeaseId()], key)
		}
	}
	for id, s := range m.sessions {
		if id != s.pb.GetLeaseId() {
			return fmt.Errorf("session %q stored under %q", s.pb.GetLeaseId(), id)
		}
		want := names[id]
		sort.Strings(want)
		got := make([]string, 0, len(s.locks))
		for n := range s.locks {
			got = append(got, n)
		}
		sort.Strings(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("session %q indexes names %q, locks say %q", id, got, want)
		}
	}
	for key, e := range m.kv {
		if key != e.GetKey() {
			return fmt.Errorf("kv %q stored under %q", e.GetKey(), key)
		}
		if e.GetToken() == 0 || e.GetToken() > m.token {
			return fmt.Errorf("kv %q at token %d, counter %d", key, e.GetToken(), m.token)
		}
	}
	return nil
}

// roundTrip checks that Snapshot → Restore into a fresh Machine → Snapshot
// gives the same bytes, and returns the restored Machine.
func roundTrip(t testing.TB, m *Machine) *Machine {
	t.Helper()
	b, err := m.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	r := New(m.limits)
	if err := r.Restore(b); err != nil {
		t.Fatalf("Restore of own snapshot: %v", err)
	}
	b2, err := r.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot after Restore: %v", err)
	}
	if !bytes.Equal(b, b2) {
		t.Fatalf("Snapshot → Restore → Snapshot changed the bytes:\n%x\n%x", b, b2)
	}
	if err := consistent(r); err != nil {
		t.Fatalf("restored state inconsistent: %v", err)
	}
	return r
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func isErr(got, want error) bool {
	if want == nil {
		return got == nil
	}
	return errors.Is(got, want)
}

// applyCase is one row of a command-family table: a fresh Machine gets the
// setup commands (each must succeed), then cmd. Every refusal must leave the
// Snapshot bytes unchanged and report nothing else.
type applyCase struct {
	name      string
	limits    Limits // zero value: DefaultLimits()
	setup     cmds
	cmd       *fsmpb.Command
	wantErr   error
	unchanged bool // not a refusal, but the state must not change either (a CancelWait still remembers its wait id)
	check     func(t *testing.T, r *rig, res Result)
}

func runCases(t *testing.T, cases []applyCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			limits := tc.limits
			if limits == (Limits{}) {
				limits = DefaultLimits()
			}
			r := newRig(t, limits)
			r.must(tc.setup...)
			before := r.snapshot()
			if cw := tc.cmd.GetWithdraw(); tc.unchanged && cw != nil {
				before = withdrawnRemembered(t, limits, tc.setup, cw)
			}
			res := r.apply(tc.cmd)
			if !isErr(res.Err, tc.wantErr) {
				t.Fatalf("Err = %v, want %v", res.Err, tc.wantErr)
			}
			if (tc.wantErr != nil || tc.unchanged) && !bytes.Equal(before, r.snapshot()) {
				t.Fatalf("state changed by %v", tc.cmd)
			}
			if tc.wantErr != nil || tc.unchanged {
				if res.Holding != nil || res.Queued || res.KV != nil || len(res.Events) > 0 ||
					len(res.Released) > 0 || len(res.EndedSessions) > 0 || len(res.LockDelays) > 0 {
					t.Fatalf("a command that changed nothing reported effects: %+v", res)
				}
			}
			if tc.check != nil {
				tc.check(t, r, res)
			}
		})
	}
}

// withdrawnRemembered is the snapshot of setup after a withdrawal that
// changed nothing but its session's memory of withdrawn wait ids.
func withdrawnRemembered(t *testing.T, limits Limits, setup cmds, cw *fsmpb.CancelWait) []byte {
	t.Helper()
	r := newRig(t, limits)
	r.must(setup...)
	if s := r.m.sessions[cw.GetLeaseId()]; s != nil && cw.GetWaitId() != 0 {
		r.m.rememberWithdrawn(s, cw.GetWaitId())
	}
	return r.snapshot()
}

func wantHolder(t *testing.T, r *rig, name, lease string, token uint64) {
	t.Helper()
	if gotLease, gotToken := r.holder(name); gotLease != lease || gotToken != token {
		t.Fatalf("holder of %q = (%q, %d), want (%q, %d)", name, gotLease, gotToken, lease, token)
	}
}

func wantWaiters(t *testing.T, r *rig, name string, leases ...string) {
	t.Helper()
	if got := r.waiters(name); !slices.Equal(got, leases) {
		t.Fatalf("waiters of %q = %q, want %q", name, got, leases)
	}
}

// ev is the part of an Event the tables compare.
type ev struct {
	typ   string // ACQUIRED, RELEASED, ...
	name  string
	lease string
	token uint64
}

func wantEvents(t *testing.T, res Result, want ...ev) {
	t.Helper()
	var got []ev
	for _, e := range res.Events {
		got = append(got, ev{strings.TrimPrefix(e.Type.String(), "EVENT_TYPE_"), e.Name, e.LeaseID, e.Token})
	}
	if !slices.Equal(got, want) {
		t.Fatalf("events = %+v, want %+v", got, want)
	}
}

func wantHolding(t *testing.T, res Result, lease string, token uint64) {
	t.Helper()
	if res.Holding == nil || res.Holding.GetLeaseId() != lease || res.Holding.GetToken() != token {
		t.Fatalf("Result.Holding = %v, want (%q, %d)", res.Holding, lease, token)
	}
}

func wantKV(t *testing.T, r *rig, key, value string, token uint64) {
	t.Helper()
	e := r.m.KV(key)
	if e == nil || string(e.GetValue()) != value || e.GetToken() != token {
		t.Fatalf("KV(%q) = %v, want %q at token %d", key, e, value, token)
	}
}

// mustPanic fails unless f panics.
func mustPanic(t *testing.T, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Fatal("did not panic")
		}
	}()
	f()
}
