//go:build leasehold_sim && mutant_read_any

package sim

import "context"

// Mutant: a linearizable read is served by any running node from its
// applied state, without a leadership check or a read barrier.
func init() {
	readTarget = func(ctx context.Context, cl *client) *node {
		for _, k := range cl.rng.Perm(len(cl.c.nodes)) {
			n := cl.c.nodes[k]
			n.mu.Lock()
			up := n.up
			n.mu.Unlock()
			if up {
				return n
			}
		}
		return nil
	}
	readBarrier = func(context.Context, *node) error { return nil }
}
