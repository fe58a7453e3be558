//go:build leasehold_sim && mutant_outcome_lost

package sim

import (
	"errors"

	"github.com/hashicorp/raft"
)

// Mutant: an entry whose leader lost leadership before it committed is
// reported as not applied (it may still commit under the next leader).
func init() {
	prev := notApplied
	notApplied = func(err error) bool { return prev(err) || errors.Is(err, raft.ErrLeadershipLost) }
}
