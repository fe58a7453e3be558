package raftnode

import (
	"github.com/hashicorp/go-hclog"

	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// reconnect replaces node i's transport with a fresh one at the same
// address, connected both ways to every live node, and returns it.
func (c *cluster) reconnect(i int) *raft.InmemTransport {
	_, tr := raft.NewInmemTransport(c.trans[i].LocalAddr())
	c.trans[i] = tr
	for j, other := range c.trans {
		if j != i && !c.closed[j] {
			tr.Connect(other.LocalAddr(), other)
			other.Connect(tr.LocalAddr(), tr)
		}
	}
	return tr
}

// wipe kills node i and removes its data dir, as a lost disk would.
func (c *cluster) wipe(i int) {
	c.t.Helper()
	c.kill(c.nodes[i])
	if err := os.RemoveAll(c.dirs[i]); err != nil {
		c.t.Fatal(err)
	}
}

// TestNoImplicitBootstrap: a node with a transport and an empty data dir
// starts only when told to bootstrap or join; the standalone node (no
// raft address) still bootstraps itself.
func TestNoImplicitBootstrap(t *testing.T) {
	t.Run("transport", func(t *testing.T) {
		cfg := testConfig(t, t.TempDir())
		_, cfg.Transport = raft.NewInmemTransport("")
		n, err := Open(cfg)
		if err == nil {
			_ = n.Close()
		}
		if !errors.Is(err, ErrNoState) {
			t.Fatalf("Open on an empty dir with neither Bootstrap nor Join: %v, want ErrNoState", err)
		}
		if entries, _ := os.ReadDir(cfg.DataDir); hasRaftState(t, cfg.DataDir) {
			t.Fatalf("the refused start left state behind: %v", entries)
		}
	})
	t.Run("tcp", func(t *testing.T) {
		cfg := testConfig(t, t.TempDir())
		cfg.RaftAddr = "127.0.0.1:0"
		n, err := Open(cfg)
		if err == nil {
			_ = n.Close()
		}
		if !errors.Is(err, ErrNoState) {
			t.Fatalf("Open on an empty dir with a raft address and neither Bootstrap nor Join: %v, want ErrNoState", err)
		}
	})
	t.Run("standalone", func(t *testing.T) {
		n := open(t, testConfig(t, t.TempDir()))
		waitLeader(t, n)
		if !validClusterID(n.ClusterID()) {
			t.Fatalf("cluster id %q", n.ClusterID())
		}
	})
}

// hasRaftState reports whether dir holds raft log entries or a term.
func hasRaftState(t *testing.T, dir string) bool {
	t.Helper()
	if !exists(filepath.Join(dir, "raft.db")) && !exists(filepath.Join(dir, "wal")) {
		return false
	}
	store, err := openStore(dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	last, err := store.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	return last > 0
}

// TestWipedFollowerCannotFork reproduces a follower whose data dir was
// lost, restarted with the flags of an ordinary restart (no bootstrap, no
// join): it must refuse to start rather than bootstrap a cluster of its
// own that would grant alone, with the same tokens, once the others are
// gone.
func TestWipedFollowerCannotFork(t *testing.T) {
	c := newCluster(t, 3)
	leader := waitLeader(t, c.nodes...)
	populate(t, leader)
	c.converge(leader)
	i := 0
	for c.nodes[i] == leader {
		i++
	}
	id := c.nodes[i].ID()
	c.wipe(i)

	cfg := testConfig(t, c.dirs[i])
	cfg.NodeID = id
	cfg.Transport = c.reconnect(i)
	n, err := Open(cfg)
	if err == nil {
		// The old behaviour: show the fork it leads to.
		defer n.Close()
		conf, _ := n.Members()
		t.Fatalf("the wiped node %s started on an empty dir with configuration %v; want ErrNoState", id, conf)
	}
	if !errors.Is(err, ErrNoState) {
		t.Fatalf("restart of the wiped node: %v, want ErrNoState", err)
	}
	if !strings.Contains(err.Error(), c.dirs[i]) {
		t.Errorf("the error %q does not name the data dir", err)
	}
}

// freeAddr returns a 127.0.0.1 address with a port free right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// tcpConfig is a node on a free TCP port, with timeouts that a loaded
// machine (the race detector, real sockets) meets.
func tcpConfig(t *testing.T, id string) Config {
	cfg := testConfig(t, t.TempDir())
	cfg.NodeID = id
	cfg.RaftAddr = freeAddr(t)
	cfg.HeartbeatTimeout = 300 * time.Millisecond
	cfg.ElectionTimeout = 300 * time.Millisecond
	cfg.LeaderLeaseTimeout = 150 * time.Millisecond
	return cfg
}

func memberOf(t *testing.T, n *Node, id string) (Member, bool) {
	t.Helper()
	ms, err := n.Members()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.ID == id {
			return m, true
		}
	}
	return Member{}, false
}

// TestJoinChecksClusterID: over TCP, a joiner that learnt the cluster id
// is added as a non-voter, catches up and is promoted; a node of another
// cluster added at some address never receives an entry: the leader sees
// it as unreachable.
func TestJoinChecksClusterID(t *testing.T) {
	c1 := tcpConfig(t, "n1")
	c1.Bootstrap = []Peer{{ID: "n1", RaftAddr: c1.RaftAddr}}
	n1 := open(t, c1)
	waitLeader(t, n1)
	populate(t, n1)

	c2 := tcpConfig(t, "n2")
	c2.Join, c2.ClusterID = true, n1.ClusterID()
	n2 := open(t, c2)
	if _, err := n1.AddMember(ctxT(t), "n2", c2.RaftAddr, true); err != nil {
		t.Fatal(err)
	}
	if m, _ := memberOf(t, n1, "n2"); m.Voter {
		t.Fatal("a new member was added as a voter")
	}
	want, _ := state(t, n1)
	eventually(t, "n2 to catch up", func() bool { got, _ := state(t, n2); return bytes.Equal(got, want) })
	if err := n1.Promote(ctxT(t), "n2"); err != nil {
		t.Fatal(err)
	}
	if m, _ := memberOf(t, n1, "n2"); !m.Voter {
		t.Fatal("n2 was not promoted")
	}
	if n2.ClusterID() != n1.ClusterID() {
		t.Fatalf("joiner's cluster id %s, cluster's %s", n2.ClusterID(), n1.ClusterID())
	}

	// A node of another cluster, standing where a member is expected.
	cx := tcpConfig(t, "x")
	cx.Join, cx.ClusterID = true, newClusterID()
	x := open(t, cx)
	// Two voters now: leadership may move under load, so ask whoever leads.
	eventually(t, "x to be added", func() bool {
		_, err := waitLeader(t, n1, n2).AddMember(ctxT(t), "x", cx.RaftAddr, true)
		return err == nil
	})
	eventually(t, "the leader to find x unreachable", func() bool { return !waitLeader(t, n1, n2).Reachable("x") })
	if _, token := state(t, x); token != 0 {
		t.Fatalf("the foreign node applied the cluster's entries (token %d)", token)
	}
	if x.raft.LastIndex() != 0 {
		t.Fatalf("the foreign node stored %d log entries of another cluster", x.raft.LastIndex())
	}
}

// TestReopenChecksClusterID: a data dir of one cluster does not open as a
// member of another.
func TestReopenChecksClusterID(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	n := open(t, cfg)
	waitLeader(t, n)
	id := n.ClusterID()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.ClusterID = newClusterID()
	if m, err := Open(cfg); !errors.Is(err, ErrClusterMismatch) {
		if err == nil {
			_ = m.Close()
		}
		t.Fatalf("reopen with another cluster id: %v, want ErrClusterMismatch", err)
	}
	cfg.ClusterID = id
	n = open(t, cfg)
	if n.ClusterID() != id {
		t.Fatalf("cluster id changed across a restart: %s, then %s", id, n.ClusterID())
	}
}

// TestStrictReconfiguration: the leader refuses a removal or a promotion
// that would leave the voters without a quorum of reachable members, and a
// member added to a single node does not cost it its quorum.
func TestStrictReconfiguration(t *testing.T) {
	t.Run("remove", func(t *testing.T) {
		c := newCluster(t, 3)
		leader := waitLeader(t, c.nodes...)
		var dead *Node
		for _, n := range c.nodes {
			if n != leader {
				dead = n
				break
			}
		}
		c.kill(dead)
		// Leadership may move under load; each check asks whoever leads
		// once it has noticed the dead node.
		var refused error
		eventually(t, "removing the last reachable follower to be refused", func() bool {
			l := waitLeader(t, c.live()...)
			if l.Reachable(dead.ID()) {
				return false
			}
			for _, n := range c.live() {
				if n != l {
					refused = l.RemoveMember(ctxT(t), n.ID())
				}
			}
			return errors.Is(refused, ErrWouldLoseQuorum)
		})
		if ms, _ := waitLeader(t, c.live()...).Members(); len(ms) != 3 {
			t.Fatalf("the refused removal changed the configuration: %v", ms)
		}
		eventually(t, "removing the dead member", func() bool {
			return waitLeader(t, c.live()...).RemoveMember(ctxT(t), dead.ID()) == nil
		})
		eventually(t, "a write after the removal", func() bool {
			_, err := waitLeader(t, c.live()...).Apply(ctxT(t), create("after", 5000))
			return err == nil
		})
	})
	t.Run("add to a single node", func(t *testing.T) {
		c := newCluster(t, 1)
		n := waitLeader(t, c.nodes...)
		addr, _ := raft.NewInmemTransport("") // never connected: a node that is not running
		if _, err := n.AddMember(ctxT(t), "n2", string(addr), false); err != nil {
			t.Fatal(err)
		}
		if m, _ := memberOf(t, n, "n2"); m.Voter {
			t.Fatal("the member was added as a voter")
		}
		mustApply(t, n, create("still-writable", 5000))
		eventually(t, "n2 to be unreachable", func() bool { return !n.Reachable("n2") })
		if err := n.Promote(ctxT(t), "n2"); !errors.Is(err, ErrWouldLoseQuorum) {
			t.Fatalf("promoting an unreachable member of a single node: %v, want ErrWouldLoseQuorum", err)
		}
		mustApply(t, n, create("still-writable-2", 5000))
		if err := n.RemoveMember(ctxT(t), "n2"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("standalone", func(t *testing.T) {
		n := open(t, testConfig(t, t.TempDir()))
		waitLeader(t, n)
		if _, err := n.AddMember(ctxT(t), "n2", "127.0.0.1:1", false); !errors.Is(err, ErrStandalone) {
			t.Fatalf("AddMember on a node without a raft address: %v, want ErrStandalone", err)
		}
	})
}

// TestForceNewCluster: after two of three nodes are lost for good, the
// survivor restarted with ForceNewCluster leads alone with all its state
// and token counter, under a new cluster id, and can grow again.
func TestForceNewCluster(t *testing.T) {
	c := newCluster(t, 3)
	leader := waitLeader(t, c.nodes...)
	last := populate(t, leader)
	c.converge(leader)
	oldID := c.nodes[0].ClusterID()
	for _, n := range c.live() {
		c.kill(n)
	}
	s := 2 // any survivor: every node has every acknowledged entry here
	cfg := testConfig(t, c.dirs[s])
	cfg.NodeID = c.nodes[s].ID()
	cfg.Transport = c.reconnect(s)
	cfg.ForceNewCluster = true
	n := open(t, cfg)
	waitLeader(t, n)
	if err := n.ReadIndex(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	checkPopulated(t, n)
	// The counter is kept (a restart may raise it, never lower it).
	if _, token := state(t, n); token < last {
		t.Fatalf("token counter %d after recovery, want at least %d", token, last)
	}
	if n.ClusterID() == oldID {
		t.Fatal("the recovered cluster kept the old cluster id")
	}
	if ms, _ := n.Members(); len(ms) != 1 {
		t.Fatalf("members after recovery: %v", ms)
	}
	mustApply(t, n, create("s9", 5000))
	if got := mustApply(t, n, acquire("after", "s9", 0)).Holding.GetToken(); got <= last {
		t.Fatalf("first grant after recovery has token %d, not above %d", got, last)
	}

	// Grow again: a new node joins with the new id and is promoted.
	_, tr := raft.NewInmemTransport("")
	tr.Connect(cfg.Transport.LocalAddr(), cfg.Transport)
	cfg.Transport.(*raft.InmemTransport).Connect(tr.LocalAddr(), tr)
	jc := testConfig(t, t.TempDir())
	jc.NodeID, jc.Transport, jc.Join, jc.ClusterID = "n4", tr, true, n.ClusterID()
	n4 := open(t, jc)
	if _, err := n.AddMember(ctxT(t), "n4", string(tr.LocalAddr()), true); err != nil {
		t.Fatal(err)
	}
	want, _ := state(t, n)
	eventually(t, "n4 to catch up", func() bool { got, _ := state(t, n4); return bytes.Equal(got, want) })
	if err := n.Promote(ctxT(t), "n4"); err != nil {
		t.Fatal(err)
	}
	mustApply(t, n, create("s10", 5000))
}

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
