//go:build leasehold_invariants

package fsm

import (
	"fmt"

	leaseholdv1 "github.com/leasehold/leasehold/api/leaseholdv1"
)

func init() { afterApply = assertInvariants }

// assertInvariants panics when the state after Apply index breaks the
// invariants: a name granted twice in one Apply without being freed in
// between, a holding of a session that does not exist, a token above the
// counter, or one token held by two names.
func assertInvariants(m *Machine, index uint64, res *Result) {
	live := map[string]bool{}
	for _, ev := range res.Events {
		switch ev.Type {
		case leaseholdv1.EventType_EVENT_TYPE_ACQUIRED:
			if live[ev.Name] {
				panic(fmt.Sprintf("fsm invariant: index %d granted %q twice", index, ev.Name))
			}
			live[ev.Name] = true
		case leaseholdv1.EventType_EVENT_TYPE_RELEASED, leaseholdv1.EventType_EVENT_TYPE_EXPIRED:
			live[ev.Name] = false
		}
	}
	owner := map[uint64]string{}
	for name, l := range m.locks {
		h := l.holder
		if h == nil {
			continue
		}
		if _, ok := m.sessions[h.LeaseId]; !ok {
			panic(fmt.Sprintf("fsm invariant: index %d: %q held by ended session %s", index, name, h.LeaseId))
		}
		if h.Token == 0 || h.Token > m.token {
			panic(fmt.Sprintf("fsm invariant: index %d: %q holds token %d, counter %d", index, name, h.Token, m.token))
		}
		if other, dup := owner[h.Token]; dup {
			panic(fmt.Sprintf("fsm invariant: index %d: %q and %q hold token %d", index, other, name, h.Token))
		}
		owner[h.Token] = name
	}
}
