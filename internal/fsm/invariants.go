//go:build leasehold_invariants

package fsm

import (
	"fmt"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// afterApply checks the state after every Apply: this build asserts the
// invariants (normal builds: invariants_off.go).
func afterApply(m *Machine, index uint64, res *Result) { assertInvariants(m, index, res) }

// assertInvariants panics when the state after Apply index breaks the
// invariants: holders of one name that may not hold it together (two
// exclusive holders of a mutex, a shared beside an exclusive holder, more
// holders than permits, two in one slot), a holding of a session that does
// not exist, a token above the counter, or one token held twice.
func assertInvariants(m *Machine, index uint64, _ *Result) {
	owner := map[uint64]string{}
	for name, l := range m.locks {
		shared, exclusive := 0, 0
		slots := map[uint32]bool{}
		for _, h := range l.holders {
			if h.GetMode() == fsmpb.Mode_MODE_SHARED {
				shared++
			} else {
				exclusive++
				if slots[h.GetSlot()] {
					panic(fmt.Sprintf("fsm invariant: index %d: %q has two holders in slot %d", index, name, h.GetSlot()))
				}
				slots[h.GetSlot()] = true
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
		if shared > 0 && exclusive > 0 || exclusive > int(permitsOf(l.permits)) {
			panic(fmt.Sprintf("fsm invariant: index %d: %q has %d shared and %d exclusive holders with %d permits", index, name, shared, exclusive, l.permits))
		}
	}
}
