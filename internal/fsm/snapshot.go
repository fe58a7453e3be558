package fsm

import (
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// Snapshot encodes the whole state, token counter included. The encoding is
// deterministic: equal states give equal bytes.
func (m *Machine) Snapshot() ([]byte, error) {
	snap := &fsmpb.Snapshot{Token: m.token}
	for _, s := range m.sessions {
		snap.Sessions = append(snap.Sessions, s.pb)
	}
	sort.Slice(snap.Sessions, func(i, j int) bool { return snap.Sessions[i].LeaseId < snap.Sessions[j].LeaseId })
	for _, l := range m.locks {
		snap.Locks = append(snap.Locks, &fsmpb.Lock{Name: l.name, Holder: l.holder, Waiters: l.waiters, DelayToken: l.delayToken, DelayMs: l.delayMs})
	}
	sort.Slice(snap.Locks, func(i, j int) bool { return snap.Locks[i].Name < snap.Locks[j].Name })
	for _, e := range m.kv {
		snap.Kv = append(snap.Kv, e)
	}
	sort.Slice(snap.Kv, func(i, j int) bool { return snap.Kv[i].Key < snap.Kv[j].Key })
	for id, addr := range m.nodes {
		snap.Nodes = append(snap.Nodes, &fsmpb.Node{Id: id, ApiAddr: addr})
	}
	sort.Slice(snap.Nodes, func(i, j int) bool { return snap.Nodes[i].Id < snap.Nodes[j].Id })
	return proto.MarshalOptions{Deterministic: true}.Marshal(snap)
}

// Restore replaces the state with a snapshot. It refuses a snapshot that no
// sequence of Applies produces (a session twice in one lock, a lock listed
// twice, a free lock with waiters, a token that is 0, above the counter or
// used twice), since such a state breaks the invariants later, up to a panic
// in Apply. On error the state is unchanged.
func (m *Machine) Restore(data []byte) error {
	var snap fsmpb.Snapshot
	if err := proto.Unmarshal(data, &snap); err != nil {
		return fmt.Errorf("fsm: decode snapshot: %w", err)
	}
	r := New(m.limits)
	r.token = snap.GetToken()
	for _, s := range snap.GetSessions() {
		r.sessions[s.GetLeaseId()] = &session{pb: s, locks: map[string]struct{}{}}
	}
	granted := map[uint64]string{} // holding and lock-delay token → lock name
	claim := func(token uint64, name string) error {
		if token == 0 || token > r.token {
			return fmt.Errorf("fsm: decode snapshot: lock %q has token %d, counter %d", name, token, r.token)
		}
		if other, dup := granted[token]; dup {
			return fmt.Errorf("fsm: decode snapshot: locks %q and %q have token %d", other, name, token)
		}
		granted[token] = name
		return nil
	}
	for _, pl := range snap.GetLocks() {
		l := &lock{name: pl.GetName(), holder: pl.GetHolder(), waiters: pl.GetWaiters(), delayToken: pl.GetDelayToken(), delayMs: pl.GetDelayMs()}
		switch _, dup := r.locks[l.name]; {
		case dup:
			return fmt.Errorf("fsm: decode snapshot: lock %q listed twice", l.name)
		case l.holder != nil && l.delayToken != 0:
			return fmt.Errorf("fsm: decode snapshot: lock %q is held and in lock-delay", l.name)
		case l.holder == nil && l.delayToken == 0:
			// A free lock passes to its queue in the same Apply, and a free
			// lock without a queue is forgotten.
			return fmt.Errorf("fsm: decode snapshot: lock %q is free but kept, with %d waiters", l.name, len(l.waiters))
		}
		if l.delayToken != 0 {
			if err := claim(l.delayToken, l.name); err != nil {
				return err
			}
		}
		if h := l.holder; h != nil {
			if err := claim(h.GetToken(), l.name); err != nil {
				return err
			}
			if err := r.link(h.GetLeaseId(), l.name); err != nil {
				return err
			}
		}
		for _, w := range l.waiters {
			if err := r.link(w.GetLeaseId(), l.name); err != nil {
				return err
			}
		}
		r.locks[l.name] = l
	}
	for _, e := range snap.GetKv() {
		if e.GetToken() == 0 || e.GetToken() > r.token {
			return fmt.Errorf("fsm: decode snapshot: kv %q has token %d, counter %d", e.GetKey(), e.GetToken(), r.token)
		}
		r.kv[e.GetKey()] = e
	}
	for _, n := range snap.GetNodes() {
		r.nodes[n.GetId()] = n.GetApiAddr()
	}
	*m = *r
	return nil
}

func (m *Machine) link(leaseID, name string) error {
	s, ok := m.sessions[leaseID]
	if !ok {
		return fmt.Errorf("fsm: decode snapshot: lock %q refers to unknown session %q", name, leaseID)
	}
	if _, dup := s.locks[name]; dup {
		return fmt.Errorf("fsm: decode snapshot: session %q appears twice in lock %q", leaseID, name)
	}
	s.locks[name] = struct{}{}
	return nil
}
