package raftnode

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
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
