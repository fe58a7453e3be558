//go:build leasehold_faults

package faults

import (
	"testing"
	"time"
)

// TestRestartStorm is schedule 7, a restart storm: every 1.5 s for six
// rounds a node is SIGKILLed and started again at once, the leader in
// every other round, without waiting for the last one to be ready: for
// moments two nodes are down and the cluster has no quorum.
//
// With hashicorp/raft-wal v0.4.0 it found, in 2 runs of 7, a node whose
// log tail Raft had truncated ("clearing log suffix") panic on its next
// start with "sealed segment has no index block" (v0.4.0 marks the
// truncated tail sealed without writing its index block;
// hashicorp/raft-wal#31). leasehold requires v0.4.1, which fixes it.
func TestRestartStorm(t *testing.T) {
	c := startCluster(t)
	ctx := t.Context()
	o := observe(c.endpoints(), "f:", names)
	var cnt counters
	until := time.Now().Add(14 * time.Second)
	ps := load(t, c, 4, until)
	time.Sleep(time.Second)
	for round := range 6 {
		victim := c.nodes[round%3]
		if round%2 == 0 {
			if l := c.leader(ctx, c.nodes); l != nil {
				victim = l
			}
		}
		c.kill(victim)
		c.start(victim)
		time.Sleep(1500 * time.Millisecond)
	}
	healed := time.Now()
	for _, n := range c.nodes {
		c.waitReady(n, 20*time.Second)
	}
	c.awaitLeader(ctx, c.nodes, leaderBound)
	cnt.failover = append(cnt.failover, time.Since(healed))
	waitAll(t, ps, time.Until(until)+10*time.Second)
	h := collect(t, o, c.endpoints(), names, ps)
	cnt.snapshotInstalls = c.snapshotInstalls()
	report(t, h, &cnt, o, "leader-changes")
}
