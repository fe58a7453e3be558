//go:build leasehold_sim

package sim

import (
	"fmt"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// P11: every error a caller sees carries the true outcome. Each proposal
// attempt carries a nonce, an unknown field of the log entry that the
// state machine ignores; an attempt reported as certainly not applied
// (errNotLeader, which clients retry and the lessor treats as "renewals
// may resume") must never show up applied, and no attempt may fail with
// anything but errNotLeader or errUnknown (no "internal").

// nonceField is the field number of the nonce: far above every field of
// fsmpb.Command.
const nonceField protowire.Number = 1 << 28

// outcomes tracks the attempts. Its methods are safe for concurrent use.
type outcomes struct {
	next atomic.Uint64

	mu         sync.Mutex        // protects following
	applied    map[uint64]uint64 // nonce → index of its first application
	notApplied map[uint64]string // nonce → the command reported not applied
}

func newOutcomes() *outcomes {
	return &outcomes{applied: map[uint64]uint64{}, notApplied: map[uint64]string{}}
}

// stamp returns a copy of cmd carrying a fresh nonce, and the nonce.
func (o *outcomes) stamp(cmd *fsmpb.Command) (*fsmpb.Command, uint64) {
	n := o.next.Add(1)
	c := proto.Clone(cmd).(*fsmpb.Command)
	b := protowire.AppendTag(append([]byte(nil), c.ProtoReflect().GetUnknown()...), nonceField, protowire.VarintType)
	c.ProtoReflect().SetUnknown(protowire.AppendVarint(b, n))
	return c, n
}

// nonceOf returns the nonce of a decoded entry, or 0.
func nonceOf(cmd *fsmpb.Command) uint64 {
	b := cmd.ProtoReflect().GetUnknown()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0
		}
		b = b[n:]
		if num == nonceField && typ == protowire.VarintType {
			v, _ := protowire.ConsumeVarint(b)
			return v
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return 0
		}
		b = b[n:]
	}
	return 0
}

// appliedAt records the first application of an entry.
func (o *outcomes) appliedAt(cmd *fsmpb.Command, index uint64) {
	n := nonceOf(cmd)
	if n == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.applied[n]; !ok {
		o.applied[n] = index
	}
}

// reportedNotApplied records an attempt its caller was told did not apply.
func (o *outcomes) reportedNotApplied(n uint64, cmd *fsmpb.Command) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.notApplied[n] = fmt.Sprintf("%v", cmd)
}

// wrong returns every attempt reported as not applied that was applied.
func (o *outcomes) wrong() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for n, what := range o.notApplied {
		if at, ok := o.applied[n]; ok {
			out = append(out, fmt.Sprintf("attempt %d reported not applied was applied at index %d: %s", n, at, what))
		}
	}
	return out
}
