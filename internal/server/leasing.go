package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
	"github.com/leasehold/leasehold/internal/lessor"
	"github.com/leasehold/leasehold/internal/raftnode"
	"github.com/leasehold/leasehold/internal/validate"
)

// The glue between a node and its lessor, outside any RPC: how the lessor
// proposes, how it starts on a new leader, how a batch of renewals is
// answered. The server's handlers call it, and so does the deterministic
// simulation (internal/harness/sim), which runs nodes without HTTP.

// LessorPropose proposes cmd on node for its lessor. An error after which
// the command certainly did not apply wraps lessor.ErrNotApplied; any
// other error leaves the outcome unknown.
func LessorPropose(ctx context.Context, node *raftnode.Node, cmd *fsmpb.Command) (fsm.Result, error) {
	res, err := node.Apply(ctx, cmd)
	if errors.Is(err, raftnode.ErrNotLeader) || errors.Is(err, raftnode.ErrUnavailable) {
		err = fmt.Errorf("%w: %w", lessor.ErrNotApplied, err)
	}
	return res, err
}

// ConfirmForLessor confirms node's leadership for its lessor
// (lessor.Confirmer): an error that wraps lessor.ErrNotLeader means another
// node leads.
func ConfirmForLessor(ctx context.Context, node *raftnode.Node) error {
	err := node.ConfirmLeadership(ctx)
	if errors.Is(err, raftnode.ErrNotLeader) {
		return fmt.Errorf("%w: %w", lessor.ErrNotLeader, err)
	}
	return err
}

// PromoteLessor starts l on node, which became the leader and applied its
// barrier. It reads the live sessions and lock-delays under the state's
// read lock: an entry applied after the read reaches Observe only after
// Promote, so no session created in between is missed (untracked, it would
// never expire).
func PromoteLessor(node *raftnode.Node, l *lessor.Lessor) {
	node.Read(func(m *fsm.Machine) {
		l.Promote(m.Sessions(), m.LockDelays())
	})
}

// RenewLeases renews ids on l, the lessor of a node that leads: one result
// per id, an invalid id refused alone. The error is lessor.ErrNotLeader
// when l does not lead (then nothing was renewed). Every KeepAlive with
// lease_ids and every KeepAliveStream message ends here.
func RenewLeases(ctx context.Context, l *lessor.Lessor, ids []string) ([]*pb.KeepAliveResult, error) {
	results := make([]*pb.KeepAliveResult, len(ids))
	valid := make([]string, 0, len(ids))
	where := make([]int, 0, len(ids))
	for i, id := range ids {
		results[i] = &pb.KeepAliveResult{LeaseId: id}
		if err := validate.LeaseID(id); err != nil {
			results[i].ErrorCode = string(api.CodeOf(err))
			continue
		}
		valid = append(valid, id)
		where = append(where, i)
	}
	out := make([]lessor.Renewal, len(valid))
	ctx, cancel := context.WithTimeout(ctx, renewTimeout)
	defer cancel()
	l.RenewMany(ctx, valid, out)
	for k, r := range out {
		if errors.Is(r.Err, lessor.ErrNotLeader) {
			return nil, r.Err
		}
		res := results[where[k]]
		if r.Err != nil {
			res.ErrorCode = string(api.CodeOf(toAPI(r.Err)))
			continue
		}
		res.TtlMs = r.TTL.Milliseconds()
	}
	return results, nil
}
