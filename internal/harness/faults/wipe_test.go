//go:build leasehold_faults

package faults

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
)

// TestWipedDataDir: a node's disk is lost under load. A follower is SIGKILLed,
// its data dir deleted, and it is brought back with the procedure README
// documents ("A node's disk is lost"): `cluster remove ID`, then `serve …
// --join ADDR` on the empty dir. Then the same for the leader, with the
// shorter form (`--join` without the remove: the leader removes the old
// member itself). Tokens, writes and grants must carry on as if nothing
// happened (no fork: P2, P4, P5, P6), and each wiped node must rejoin as a
// voter of the same cluster and catch up (by a snapshot install).
func TestWipedDataDir(t *testing.T) {
	// Snapshots every 64 entries: a wiped node catches up by a snapshot
	// install, not by replaying a log that starts at index 1.
	c := startCluster(t, "LEASEHOLD_TESTHOOK_SNAPSHOT_THRESHOLD=64")
	ctx := t.Context()
	o := observe(c.endpoints(), "f:", names)
	var cnt counters
	until := time.Now().Add(24 * time.Second)
	ps := load(t, c, 4, until)

	time.Sleep(2 * time.Second) // load before the fault
	leader := c.mustLeader(ctx)
	follower := others(c, leader)[0]
	c.kill(follower)
	wipe(t, follower)
	cl, err := client.Dial(ctx, c.endpoints(follower))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = cl.RemoveMember(rctx, follower.id)
	cancel()
	if err != nil {
		t.Fatalf("cluster remove %s: %v", follower.id, err)
	}
	follower.join = leader.apiAddr()
	c.start(follower)
	c.rejoined(ctx, follower, 30*time.Second)

	time.Sleep(2 * time.Second) // load with the rejoined follower
	leader = c.mustLeader(ctx)
	c.kill(leader)
	wipe(t, leader)
	// Two voters of three are left, and both votes are needed: on a loaded
	// machine their elections can split several times in a row (seen: five
	// terms, over 5 s). A cluster that elects no leader at all still fails.
	_, took := c.awaitLeader(ctx, others(c, leader), 3*leaderBound)
	cnt.failover = append(cnt.failover, took)
	leader.join = others(c, leader)[0].apiAddr()
	c.start(leader)
	c.rejoined(ctx, leader, 30*time.Second)

	waitAll(t, ps, time.Until(until)+10*time.Second)
	h := collect(t, o, c.endpoints(), names, ps)
	cnt.snapshotInstalls = c.snapshotInstalls()
	report(t, h, &cnt, o, "leader-changes", "snapshot-installs")
}

// wipe deletes n's data dir, as a replaced disk would.
func wipe(t *testing.T, n *node) {
	t.Helper()
	if err := os.RemoveAll(n.dir); err != nil {
		t.Fatal(err)
	}
}

// rejoined waits until n, started on an empty data dir with --join, is a
// voter of the cluster (as its peers report it), has applied every entry
// committed when it started, and holds the same cluster id as its peers
// (a node that bootstrapped a cluster of its own would fork the tokens).
func (c *cluster) rejoined(ctx context.Context, n *node, within time.Duration) {
	c.t.Helper()
	start := time.Now()
	c.waitReady(n, within)
	cl, err := client.Dial(ctx, c.endpoints(n))
	if err != nil {
		c.t.Fatal(err)
	}
	defer cl.Close()
	var target uint64 // the commit index the peers report when n is up
	var last string
	for time.Since(start) < within {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		ms, leader, err := cl.Members(qctx)
		cancel()
		if err != nil {
			last = err.Error()
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for _, m := range ms {
			if m.GetId() == leader && target == 0 {
				target = m.GetCommitIndex()
			}
		}
		for _, m := range ms {
			if m.GetId() != n.id {
				continue
			}
			last = fmt.Sprintf("%s, applied %d of %d", m.GetSuffrage(), m.GetAppliedIndex(), target)
			if strings.EqualFold(m.GetSuffrage(), "voter") && target > 0 && m.GetAppliedIndex() >= target {
				c.t.Logf("%s rejoined on an empty data dir as a voter and applied index %d within %v", n.id, target, time.Since(start).Round(time.Millisecond))
				c.sameClusterID(n)
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("%s did not rejoin as a caught-up voter within %v (last: %s)", n.id, within, last)
}

// sameClusterID fails the test unless n's data dir holds the cluster id
// every other node holds.
func (c *cluster) sameClusterID(n *node) {
	c.t.Helper()
	mine, err := os.ReadFile(filepath.Join(n.dir, "cluster-id"))
	if err != nil {
		c.t.Fatalf("%s: %v", n.id, err)
	}
	for _, o := range others(c, n) {
		theirs, err := os.ReadFile(filepath.Join(o.dir, "cluster-id"))
		if err != nil {
			c.t.Fatalf("%s: %v", o.id, err)
		}
		if !bytes.Equal(bytes.TrimSpace(mine), bytes.TrimSpace(theirs)) {
			c.t.Errorf("fork: %s rejoined with cluster id %q, %s has %q", n.id, mine, o.id, theirs)
		}
	}
}
