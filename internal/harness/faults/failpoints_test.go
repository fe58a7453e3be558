//go:build leasehold_faults

package faults

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/failpoint"
)

// exited reports whether n's process has ended (a zombie not yet reaped,
// or gone), without reaping it: kill reaps it.
func (n *node) exited() bool {
	pid := n.pid()
	if pid == 0 {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name in parentheses: "pid (comm) S ...".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

// awaitExit waits until n's process ends by itself, within d, then
// cleans up after it as kill does. It reports false, after killing n,
// when n was still running at d.
func (c *cluster) awaitExit(n *node, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !n.exited() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	ended := n.exited()
	c.kill(n)
	return ended
}

// reachedLines counts the lines in which n's log says it reached p.
func (n *node) reachedLines(p failpoint.Point) int {
	b, _ := os.ReadFile(n.logPath)
	return strings.Count(string(b), fmt.Sprintf("leasehold: failpoint %s reached", p))
}

// makeLeader hands the leadership to n until n leads or its process ends,
// within d; it fails the test at d.
func (c *cluster) makeLeader(ctx context.Context, n *node, d time.Duration) {
	c.t.Helper()
	cl, err := client.Dial(ctx, c.endpoints(n), client.WithRetryTimeout(time.Second))
	if err != nil {
		c.t.Fatal(err)
	}
	defer cl.Close()
	var last error
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		if n.exited() || c.leader(ctx, []*node{n}) == n {
			return
		}
		tctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, last = cl.TransferLeader(tctx, n.id)
		cancel()
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("%s did not become the leader within %v (last transfer: %v)", n.id, d, last)
}

// traffic keeps the cluster writing — a session opened and closed in a
// loop, unchecked — until the returned stop is called (more than once is
// fine), so that every armed failpoint is reached however long the rounds
// take on a loaded machine.
func traffic(eps string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		cl, err := client.Dial(ctx, eps)
		if err != nil {
			return
		}
		defer cl.Close()
		for ctx.Err() == nil {
			s, err := cl.NewSession(ctx, client.WithTTL(2*time.Second), client.WithOwner("traffic"))
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
				continue
			}
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = s.Close(cctx)
			cancel()
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}

// fpRound arms one failpoint on the victim for one role.
type fpRound struct {
	point failpoint.Point
	at    int
	role  string // leader or follower
}

func (r fpRound) env() string {
	return fmt.Sprintf("%s=%s:%d:%s", failpoint.Env, r.point, r.at, r.role)
}

// fpRounds arms every failpoint once for each role that reaches it:
// leader and follower both append to their log, apply committed entries
// and persist snapshots of their own; the reply to a client
// (commit-reply) is sent by the leader only. The roles alternate, so that
// a leader round follows a follower round. The hit counts are reached
// within about a second of load.
var fpRounds = []fpRound{
	{failpoint.LogAppendBefore, 30, "follower"},
	{failpoint.LogAppendBefore, 30, "leader"},
	{failpoint.LogAppendAfter, 30, "follower"},
	{failpoint.LogAppendAfter, 30, "leader"},
	{failpoint.FSMApplyBefore, 50, "follower"},
	{failpoint.FSMApplyBefore, 50, "leader"},
	{failpoint.FSMApplyAfter, 50, "follower"},
	{failpoint.FSMApplyAfter, 50, "leader"},
	{failpoint.SnapshotPersistBefore, 1, "follower"},
	{failpoint.SnapshotPersistBefore, 1, "leader"},
	{failpoint.SnapshotPersistAfter, 1, "follower"},
	{failpoint.SnapshotPersistAfter, 1, "leader"},
	{failpoint.CommitReply, 20, "leader"},
}

// TestFailpoints is a schedule of crashes at the failpoints (a binary
// built with leasehold_failpoints): under load, one node is started with
// a failpoint armed for a role — for the leader's, the leadership is
// handed to it — and crashes itself (SIGKILL) at it; the two others must
// elect or keep a leader, and the node is started again on its data dir
// with the next failpoint armed, until every failpoint has crashed it
// once in each role that reaches it. Snapshots every 16 entries so that
// the snapshot points are reached.
func TestFailpoints(t *testing.T) {
	base := "LEASEHOLD_TESTHOOK_SNAPSHOT_THRESHOLD=16"
	c := startCluster(t, base)
	ctx := t.Context()
	o := observe(c.endpoints(), "f:", names)
	var cnt counters
	until := time.Now().Add(26 * time.Second)
	ps := load(t, c, 4, until)
	stopTraffic := traffic(c.endpoints())
	defer stopTraffic()
	time.Sleep(time.Second) // load before the first fault
	victim := others(c, c.mustLeader(ctx))[0]
	c.kill(victim)
	began := time.Now()
	for i, r := range fpRounds {
		before := victim.reachedLines(r.point)
		victim.env = []string{base, r.env()}
		c.start(victim)
		if r.role == "leader" {
			c.waitReady(victim, 20*time.Second)
			c.makeLeader(ctx, victim, 15*time.Second)
		}
		if !c.awaitExit(victim, 15*time.Second) || victim.reachedLines(r.point) == before {
			t.Errorf("failpoint %s (hit %d as %s) was armed on %s and never reached", r.point, r.at, r.role, victim.id)
		} else {
			cnt.failpoints++
			t.Logf("round %d: %s crashed at %s (hit %d as %s) %v into the run", i, victim.id, r.point, r.at, r.role, time.Since(began).Round(time.Millisecond))
		}
		// P8: the two others keep or elect a leader.
		_, took := c.awaitLeader(ctx, others(c, victim), leaderBound)
		if r.role == "leader" {
			cnt.failover = append(cnt.failover, took)
		}
	}
	stopTraffic()
	victim.env = []string{base}
	c.start(victim)
	c.waitReady(victim, 20*time.Second)
	waitAll(t, ps, time.Until(until)+10*time.Second)
	h := collect(t, o, c.endpoints(), names, ps)
	cnt.snapshotInstalls = c.snapshotInstalls()
	report(t, h, &cnt, o, "leader-changes", "failpoints")
	if cnt.failpoints != len(fpRounds) {
		t.Errorf("coverage: %d of %d armed failpoints reached", cnt.failpoints, len(fpRounds))
	}
}
