//go:build leasehold_sim

package sim

import (
	"context"
	"errors"

	"github.com/hashicorp/raft"
)

// Seams of the simulated read path and resource. A build with a mutant_*
// tag replaces one (see the mutant_*.go files) so that TestMutants can
// prove the suite catches the bug. Normal builds never change them.
var (
	// readTarget picks the node that serves a linearizable read: one that
	// believes it leads.
	readTarget = func(ctx context.Context, cl *client) *node { return cl.pick(ctx) }
	// readBarrier is what n checks before it reads: leadership confirmed by
	// a quorum and every entry committed before the call applied, as
	// raftnode.ReadIndex does.
	readBarrier = func(ctx context.Context, n *node) error { return n.readIndex(ctx) }
	// fenceReads: the fenced resource admits a read for update only with a
	// token at or above its high-water, and raises the high-water to it.
	fenceReads = true
	// notApplied reports whether a failed raft.Apply certainly did not
	// apply, as raftnode decides it: refused before it entered the log.
	notApplied = func(err error) bool {
		return errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrEnqueueTimeout) || errors.Is(err, raft.ErrLeadershipTransferInProgress)
	}
)
