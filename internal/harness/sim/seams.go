//go:build leasehold_sim

package sim

import (
	"context"
	"errors"

	"github.com/leasehold/leasehold/internal/raftnode"
)

// Seams of the simulated read path and resource. A build with a mutant_*
// tag replaces one (see the mutant_*.go files) so that TestMutants can
// prove the suite catches the bug. Normal builds never change them.
var (
	// readTarget picks the node that serves a linearizable read: one that
	// believes it leads.
	readTarget = func(ctx context.Context, cl *client) *node { return cl.pick(ctx) }
	// readBarrier is what the node rn checks before it reads, as the
	// server's linearizable reads do: raftnode.Node.ReadIndex.
	readBarrier = func(ctx context.Context, rn *raftnode.Node) error { return rn.ReadIndex(ctx) }
	// fenceReads: the fenced resource admits a read for update only with a
	// token at or above its high-water, and raises the high-water to it.
	fenceReads = true
	// notApplied reports whether a failed raftnode.Node.Apply certainly did
	// not apply, as a client reads the server's answer: not-leader and
	// unavailable are retried, anything else may have applied.
	notApplied = func(err error) bool {
		return errors.Is(err, raftnode.ErrNotLeader) || errors.Is(err, raftnode.ErrUnavailable)
	}
)
