package raftnode

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"testing"
)

// A follower that fell behind a compacted log catches up by installing a
// snapshot: OnRestore tells its owner that the entries in between were
// never applied (and never observed) there.
func TestOnRestoreAtSnapshotInstall(t *testing.T) {
	var restores [3]atomic.Int32
	c := newCluster(t, 3, func(i int, cfg *Config) {
		cfg.TrailingLogs = 0 // a snapshot compacts everything it covers
		cfg.OnRestore = func(uint64) { restores[i].Add(1) }
	})
	leader := waitLeader(t, c.nodes...)
	c.converge(leader)
	f := 0
	for c.nodes[f] == leader {
		f++
	}
	var others []*Node
	for j, n := range c.nodes {
		if j != f {
			others = append(others, n)
		}
	}
	before := restores[f].Load()
	cut := func(connect bool) {
		for j, tr := range c.trans {
			if j == f {
				continue
			}
			if connect {
				tr.Connect(c.trans[f].LocalAddr(), c.trans[f])
				c.trans[f].Connect(tr.LocalAddr(), tr)
			} else {
				tr.Disconnect(c.trans[f].LocalAddr())
				c.trans[f].Disconnect(tr.LocalAddr())
			}
		}
	}
	cut(false)
	for i := 0; i < 20; {
		// Under load a 50 ms leader lease can lapse: apply on whoever leads.
		if _, err := waitLeader(t, others...).Apply(ctxT(t), create(fmt.Sprint("while-cut-", i), 5000)); err == nil {
			i++
		}
	}
	// Both others compact, so whichever leads after the heal (f's higher
	// term may force an election) has only a snapshot to send.
	leader = waitLeader(t, others...)
	for _, n := range others {
		want, _ := state(t, leader)
		eventually(t, "node "+n.ID()+" to converge", func() bool {
			got, _ := state(t, n)
			return bytes.Equal(got, want)
		})
		if err := n.Raft().Snapshot().Error(); err != nil {
			t.Fatal(err)
		}
	}
	cut(true)
	c.converge(waitLeader(t, others...))
	if restores[f].Load() == before {
		t.Fatal("the follower caught up from a snapshot without OnRestore")
	}
}
