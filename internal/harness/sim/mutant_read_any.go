//go:build leasehold_sim && mutant_read_any

package sim

import (
	"context"

	"github.com/leasehold/leasehold/internal/raftnode"
)

// Mutant: a linearizable read is served by any running node from its
// applied state, without a leadership check or a read barrier.
func init() {
	readTarget = func(ctx context.Context, cl *client) *node {
		for _, k := range cl.rng.Perm(len(cl.c.nodes)) {
			if rn, _ := cl.c.nodes[k].current(); rn != nil {
				return cl.c.nodes[k]
			}
		}
		return nil
	}
	readBarrier = func(context.Context, *raftnode.Node) error { return nil }
}
