package raftnode

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
)

// During a leadership transfer raft refuses new entries before appending
// them: Apply says ErrUnavailable (not applied, retry), never
// ErrOutcomeUnknown.
func TestApplyDuringLeadershipTransferIsUnavailable(t *testing.T) {
	c := newCluster(t, 3)
	leader := waitLeader(t, c.nodes...)
	c.converge(leader)
	var li, ti int
	for i, n := range c.nodes {
		if n == leader {
			li = i
		} else {
			ti = i
		}
	}
	// Cut the target off, so that the transfer waits for it to catch up.
	c.trans[li].Disconnect(c.trans[ti].LocalAddr())
	mustApply(t, leader, create("behind", 5000))
	target := c.nodes[ti]
	f := leader.Raft().LeadershipTransferToServer(raft.ServerID(target.ID()), c.trans[ti].LocalAddr())
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	refused := 0
	for i := 0; ; i++ {
		select {
		case <-done:
			if refused == 0 {
				t.Fatal("the transfer ended before any Apply saw it in progress")
			}
			return
		default:
		}
		_, err := leader.Apply(ctxT(t), create(fmt.Sprint("during-", i), 5000))
		switch {
		case err == nil:
		case errors.Is(err, ErrUnavailable):
			refused++
		case errors.Is(err, ErrNotLeader):
		default:
			t.Fatalf("Apply during a leadership transfer: %v, want ErrUnavailable", err)
		}
	}
}
