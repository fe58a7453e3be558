//go:build leasehold_sim && mutant_read_unconfirmed

package sim

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/internal/raftnode"
)

// Mutant: a linearizable read is served by a node that believes it leads
// once it applied its commit index, without confirming its leadership.
func init() {
	readBarrier = func(ctx context.Context, rn *raftnode.Node) error {
		if !rn.IsLeader() {
			return raftnode.ErrNotLeader
		}
		commit := rn.Raft().CommitIndex()
		for rn.Raft().AppliedIndex() < commit {
			select {
			case <-ctx.Done():
				return raftnode.ErrUnavailable
			case <-time.After(time.Millisecond):
			}
		}
		return nil
	}
}
