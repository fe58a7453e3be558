package raftnode

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

func register(id string) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_RegisterNode{RegisterNode: &fsmpb.RegisterNode{Id: id, ApiAddr: "127.0.0.1:1"}}}
}

// openAll opens the nodes of cfgs at once (founders wait for each other)
// and closes them when the test ends.
func openAll(t *testing.T, cfgs []Config) []*Node {
	t.Helper()
	nodes := make([]*Node, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i := range cfgs {
		wg.Go(func() { nodes[i], errs[i] = Open(cfgs[i]) })
	}
	wg.Wait()
	for i, n := range nodes {
		if errs[i] != nil {
			t.Fatalf("open %s: %v", cfgs[i].NodeID, errs[i])
		}
		t.Cleanup(func() { _ = n.Close() })
	}
	return nodes
}

// openRefused runs Open(cfg) on its own goroutine, for a start expected
// to fail, and sends its error (closing a node that opened after all).
func openRefused(cfg Config) <-chan error {
	done := make(chan error, 1)
	go func() {
		n, err := Open(cfg)
		if n != nil {
			_ = n.Close()
		}
		done <- err
	}()
	return done
}

// foundingConfigs returns the configs of n founders over TCP with one
// bootstrap list.
func foundingConfigs(t *testing.T, n int) []Config {
	var cfgs []Config
	var peers []Peer
	for i := range n {
		c := tcpConfig(t, fmt.Sprintf("n%d", i+1))
		cfgs = append(cfgs, c)
		peers = append(peers, Peer{ID: c.NodeID, RaftAddr: c.RaftAddr})
	}
	for i := range cfgs {
		cfgs[i].Bootstrap = peers
	}
	return cfgs
}

// TestWipedMemberCannotRebootstrap: over TCP, the founders of a cluster
// bootstrapped from a list found it together; a member whose data dir was
// lost and which is started again with the same list is refused with
// ErrClusterFormed while a voter that holds the log answers, and while
// none answers it waits instead of founding the cluster again (with one
// stale voter it would form a quorum without the acknowledged entries).
func TestWipedMemberCannotRebootstrap(t *testing.T) {
	cfgs := foundingConfigs(t, 3)
	nodes := openAll(t, cfgs)
	leader := waitLeader(t, nodes...)
	mustApply(t, leader, register("n1"))
	want, _ := state(t, leader)
	for _, n := range nodes {
		eventually(t, n.ID()+" to catch up", func() bool { got, _ := state(t, n); return bytes.Equal(got, want) })
	}

	// n3 loses its data while n1 and n2 run: refused.
	if err := nodes[2].Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(cfgs[2].DataDir); err != nil {
		t.Fatal(err)
	}
	n3, err := Open(cfgs[2])
	if err == nil {
		_ = n3.Close()
		t.Fatal("the wiped n3 bootstrapped again")
	}
	if !errors.Is(err, ErrClusterFormed) || !strings.Contains(err.Error(), "cluster remove n3") || !strings.Contains(err.Error(), "--join") {
		t.Fatalf("restart of the wiped n3 with the bootstrap list: %v, want ErrClusterFormed saying how to rejoin", err)
	}
	if hasRaftState(t, cfgs[2].DataDir) {
		t.Fatal("the refused start left Raft state behind")
	}

	// Now every other voter is down as well: n3 waits, founding nothing,
	// until a voter with the log comes back and answers.
	for _, n := range nodes[:2] {
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
	}
	done := openRefused(cfgs[2])
	select {
	case err := <-done:
		t.Fatalf("with every other voter down, the wiped n3 did not wait: %v", err)
	case <-time.After(3 * foundProbeInterval):
	}
	open(t, cfgs[0]) // n1 with its log
	select {
	case err := <-done:
		if !errors.Is(err, ErrClusterFormed) {
			t.Fatalf("the waiting n3 once n1 answered: %v, want ErrClusterFormed", err)
		}
		if hasRaftState(t, cfgs[2].DataDir) {
			t.Fatal("the n3 that waited wrote Raft state")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting n3 did not hear n1 within 10 s")
	}
}

// TestFoundingWaitAborts: a founder waiting for the voters of its list
// ends with ErrShutdown when Abort is closed, leaving no state.
func TestFoundingWaitAborts(t *testing.T) {
	cfgs := foundingConfigs(t, 2)
	abort := make(chan struct{})
	cfgs[0].Abort = abort
	done := openRefused(cfgs[0])
	close(abort)
	select {
	case err := <-done:
		if !errors.Is(err, ErrShutdown) {
			t.Fatalf("Open after Abort: %v, want ErrShutdown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Open still waits 10 s after Abort")
	}
	if hasRaftState(t, cfgs[0].DataDir) {
		t.Fatal("the aborted founder wrote Raft state")
	}
}

// TestPeerTLS: with Config.PeerTLS the Raft connections run inside mutual
// TLS: a member with the cluster's certificate joins and catches up; a
// node of the same cluster id without TLS gets nothing.
func TestPeerTLS(t *testing.T) {
	conf := testTLS(t)
	c1 := tcpConfig(t, "n1")
	c1.PeerTLS = conf
	c1.Bootstrap = []Peer{{ID: "n1", RaftAddr: c1.RaftAddr}}
	n1 := open(t, c1)
	waitLeader(t, n1)
	populate(t, n1)

	c2 := tcpConfig(t, "n2")
	c2.PeerTLS, c2.Join, c2.ClusterID = conf, true, n1.ClusterID()
	n2 := open(t, c2)
	if _, err := n1.AddMember(ctxT(t), "n2", c2.RaftAddr, true); err != nil {
		t.Fatal(err)
	}
	want, _ := state(t, n1)
	eventually(t, "n2 to catch up over TLS", func() bool { got, _ := state(t, n2); return bytes.Equal(got, want) })

	c3 := tcpConfig(t, "n3")
	c3.Join, c3.ClusterID = true, n1.ClusterID() // no TLS
	n3 := open(t, c3)
	if _, err := n1.AddMember(ctxT(t), "n3", c3.RaftAddr, true); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the leader to find the plain-TCP node unreachable", func() bool { return !n1.Reachable("n3") })
	if n3.raft.LastIndex() != 0 {
		t.Fatalf("the node without TLS stored %d entries", n3.raft.LastIndex())
	}
}

// TestFreshRejoinOfVoter: a voter that starts over with an empty data dir
// and joins without being removed first is taken out of the voters and
// added back as a non-voter (it lost its log and its votes), then
// promoted once caught up; a fresh join under the id of a member that
// still answers is refused.
func TestFreshRejoinOfVoter(t *testing.T) {
	c := newCluster(t, 3)
	leader := waitLeader(t, c.nodes...)
	populate(t, leader)
	c.converge(leader)
	var alive []int
	for i, n := range c.nodes {
		if n != leader {
			alive = append(alive, i)
		}
	}
	w, other := alive[0], c.nodes[alive[1]]
	if _, err := leader.AddMember(ctxT(t), other.ID(), string(c.trans[alive[1]].LocalAddr()), true); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("fresh join under the id of a running member: %v, want ErrUnavailable", err)
	}
	if m, _ := memberOf(t, leader, other.ID()); !m.Voter {
		t.Fatal("the refused fresh join changed the running member")
	}

	id := c.nodes[w].ID()
	c.wipe(w)
	eventually(t, "the leader to find "+id+" gone", func() bool { return !leader.Reachable(id) })
	if _, err := leader.AddMember(ctxT(t), id, string(c.trans[w].LocalAddr()), true); err != nil {
		t.Fatal(err)
	}
	if m, ok := memberOf(t, leader, id); !ok || m.Voter {
		t.Fatalf("after a fresh join the member is %+v (present %v), want a non-voter", m, ok)
	}
	cfg := testConfig(t, c.dirs[w])
	cfg.NodeID, cfg.Transport, cfg.Join, cfg.ClusterID = id, c.reconnect(w), true, leader.ClusterID()
	n := open(t, cfg)
	want, _ := state(t, leader)
	eventually(t, id+" to catch up", func() bool { got, _ := state(t, n); return bytes.Equal(got, want) })
	if err := leader.Promote(ctxT(t), id); err != nil {
		t.Fatal(err)
	}
	mustApply(t, leader, create("after-rejoin", 5000))
}

// TestSlowFounderFoundsAfterOthersFormed: founders need not finish waiting
// together. n3 answers the probes of n1 and n2 while it still waits for
// them (it heard nothing yet), so they found and form the cluster without
// it; when n3 asks again they are formed, yet they recognise the nonce of
// the very process they counted as empty, and n3 founds too. A process
// that starts over with a new nonce (a data dir lost after founding) is
// refused.
func TestSlowFounderFoundsAfterOthersFormed(t *testing.T) {
	cfgs := foundingConfigs(t, 3)
	clusterID := peersClusterID(cfgs[0].Bootstrap)
	f3 := newFounding()
	// n3 listens and answers, as a waiting founder does, but has not asked
	// anybody yet.
	sl, err := newStreamLayer(cfgs[2].RaftAddr, nil, nil, clusterID, "n3", cfgs[2].Logger)
	if err != nil {
		t.Fatal(err)
	}
	sl.founding = f3
	var wg sync.WaitGroup
	wg.Go(func() { answerProbes(sl, &wg) })
	nodes := openAll(t, cfgs[:2])
	leader := waitLeader(t, nodes...)
	mustApply(t, leader, register("n1"))
	for _, n := range nodes {
		eventually(t, n.ID()+" to be formed", n.formed)
	}
	_ = sl.Close()
	wg.Wait()

	if err := awaitFounding(cfgs[2], clusterID, newFounding()); !errors.Is(err, ErrClusterFormed) {
		t.Fatalf("a new n3 process after the cluster formed: %v, want ErrClusterFormed", err)
	}
	if err := awaitFounding(cfgs[2], clusterID, f3); err != nil {
		t.Fatalf("the n3 process n1 and n2 founded with, asking after they formed: %v, want nil (found)", err)
	}
}

// TestSingleNodeGrows: a single node started without a Raft address and
// started again, on its data dir, with one records that address once it
// leads; a member then joins, and the leadership can move to it (its
// election asks the first node for a vote at the recorded address).
func TestSingleNodeGrows(t *testing.T) {
	c1 := testConfig(t, t.TempDir())
	n1, err := Open(c1)
	if err != nil {
		t.Fatal(err)
	}
	waitLeader(t, n1)
	populate(t, n1)
	if err := n1.Close(); err != nil {
		t.Fatal(err)
	}

	c1.RaftAddr = freeAddr(t)
	n1 = open(t, c1)
	waitLeader(t, n1)
	eventually(t, "n1's Raft address to be recorded", func() bool {
		m, ok := memberOf(t, n1, "n1")
		return ok && m.RaftAddr == c1.RaftAddr
	})
	want, _ := state(t, n1)

	c2 := tcpConfig(t, "n2")
	c2.Join, c2.ClusterID = true, n1.ClusterID()
	n2 := open(t, c2)
	if _, err := n1.AddMember(ctxT(t), "n2", c2.RaftAddr, true); err != nil {
		t.Fatal(err)
	}
	eventually(t, "n2 to catch up", func() bool { got, _ := state(t, n2); return bytes.Equal(got, want) })
	if err := n1.Promote(ctxT(t), "n2"); err != nil {
		t.Fatal(err)
	}
	if err := n1.Raft().LeadershipTransferToServer("n2", raft.ServerAddress(c2.RaftAddr)).Error(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "n2 to lead", n2.IsLeader)
}
