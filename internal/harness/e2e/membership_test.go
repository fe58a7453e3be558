package e2e

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
)

// waitExit waits up to d for p's process to end and returns its error
// (nil for exit 0); it fails the test if the process still runs.
func waitExit(t *testing.T, p *proc, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	cmd := p.cmd
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		p.cmd = nil
		return err
	case <-time.After(d):
		t.Fatalf("%s still runs after %v", p.id, d)
		return nil
	}
}

func leaderAndFollowers(t *testing.T, procs []*proc) (leader *proc, followers []*proc) {
	t.Helper()
	m := waitMembers(t, procs[0].api, len(procs))
	for _, p := range procs {
		if p.id == m.LeaderID {
			leader = p
		} else {
			followers = append(followers, p)
		}
	}
	if leader == nil {
		t.Fatalf("leader %q is not one of the nodes", m.LeaderID)
	}
	return leader, followers
}

// acquireToken takes name through endpoint and returns its token; the
// session is closed when the test ends.
func acquireToken(t *testing.T, endpoint, name string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	l, err := s.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("acquire %s via %s: %v", name, endpoint, err)
	}
	return l.Token()
}

// TestWipedFollowerCannotFork: a follower whose data dir was lost,
// restarted with the ordinary restart command (no --bootstrap, no --join),
// refuses to start and says what to do, instead of forming a cluster of
// its own that grants the same tokens once the others are gone. The
// documented way back (cluster remove, then --join) brings it back as a
// voter with the cluster's state.
func TestWipedFollowerCannotFork(t *testing.T) {
	procs := startCluster(t, 3)
	leader, followers := leaderAndFollowers(t, procs)
	first := acquireToken(t, leader.api, "split:a")
	w := followers[0]
	w.kill()
	if err := os.RemoveAll(w.dir); err != nil {
		t.Fatal(err)
	}

	w.start(t, "") // serve --node-id --listen --raft-addr --data
	err := waitExit(t, w, 20*time.Second)
	if err == nil {
		t.Fatal("the wiped node exited 0")
	}
	logText, _ := os.ReadFile(w.log.Name())
	for _, want := range []string{"no state in " + w.dir, "leasehold cluster remove " + w.id, "--join"} {
		if !strings.Contains(string(logText), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, tail(string(logText), 1500))
		}
	}
	// The others gone, nothing on the wiped node's address grants.
	for _, p := range followers[1:] {
		p.kill()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if c, err := client.Dial(ctx, w.api); err == nil {
		if s, err := c.NewSession(ctx); err == nil {
			t.Fatalf("the wiped node's address serves sessions (%v)", s)
		}
		c.Close()
	}

	// Way back: restart the other follower, remove the lost member, join.
	followers[1].start(t, "")
	waitHealthy(t, followers[1].api)
	removeMember(t, w.id, leader.api)
	w.start(t, "", "--join", leader.api)
	waitMembers(t, leader.api, 3)
	if got := acquireToken(t, w.api, "split:b"); got <= first {
		t.Fatalf("grant through the rejoined node: token %d, not above %d", got, first)
	}
}

// TestAddDeadMemberKeepsQuorum: `cluster add` of a node that is not
// running, on a single node, adds a non-voter: the node keeps granting,
// also after a restart, and the member is listed as a nonvoter.
func TestAddDeadMemberKeepsQuorum(t *testing.T) {
	procs := newProcs(t, 2)
	n1, ghost := procs[0], procs[1]
	t.Cleanup(func() { n1.kill(); n1.log.Close(); ghost.log.Close() })
	n1.start(t, n1.id+"="+n1.raft)
	waitHealthy(t, n1.api)
	var added membersOut
	cli(t, &added, "cluster", "add", ghost.id, ghost.raft, ghost.api, "--endpoints", n1.api)
	for _, m := range added.Members {
		if m.ID == ghost.id && m.Suffrage != "Nonvoter" {
			t.Fatalf("the added member is a %s", m.Suffrage)
		}
	}
	acquireToken(t, n1.api, "ghost:a")
	n1.kill()
	n1.start(t, "")
	waitHealthy(t, n1.api)
	acquireToken(t, n1.api, "ghost:b")
	var rm membersOut
	cli(t, &rm, "cluster", "remove", ghost.id, "--endpoints", n1.api)
}

// TestForceNewCluster: 3 nodes, two lost for good; the survivor restarted
// with --force-new-cluster serves alone with its token counter, a new node
// joins it, and an old member that comes back is refused at the Raft
// handshake (another cluster id).
func TestForceNewCluster(t *testing.T) {
	procs := startCluster(t, 3)
	leader, _ := leaderAndFollowers(t, procs)
	last := acquireToken(t, leader.api, "force:a")
	for _, p := range procs {
		p.kill()
	}
	s, lost := procs[2], procs[:2]
	s.start(t, "", "--force-new-cluster")
	waitHealthy(t, s.api)
	if got := acquireToken(t, s.api, "force:b"); got <= last {
		t.Fatalf("grant after recovery: token %d, not above %d", got, last)
	}
	extra := newProcs(t, 1)[0]
	extra.id = "n4"
	t.Cleanup(func() { extra.kill(); extra.log.Close() })
	extra.start(t, "", "--join", s.api)
	waitMembers(t, s.api, 2)

	// An old member restarted with its data belongs to the old cluster.
	lost[0].start(t, "")
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(s.log.Name())
		if strings.Contains(string(b), "raft connection refused") && strings.Contains(string(b), lost[0].id) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the recovered node never refused the old member:\n%s", tail(string(b), 2000))
		}
		time.Sleep(50 * time.Millisecond)
	}
	var m membersOut
	cli(t, &m, "cluster", "members", "--endpoints", s.api)
	if len(m.Members) != 2 {
		t.Fatalf("members after the old node came back: %+v", m)
	}
}

// removeMember runs `cluster remove` until it succeeds: right after a
// restart the leader may not have heard from every voter again, and
// refuses a removal that would leave it without a reachable quorum.
func removeMember(t *testing.T, id, endpoint string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := exec.Command(binary, "cluster", "remove", id, "--endpoints", endpoint, "-o", "json").CombinedOutput()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster remove %s: %v\n%s", id, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
