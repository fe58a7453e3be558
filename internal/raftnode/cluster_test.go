package raftnode

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
)

// cluster is N nodes on raft's in-memory transport, each with its own data
// dir, bootstrapped together.
type cluster struct {
	t      *testing.T
	nodes  []*Node
	trans  []*raft.InmemTransport
	dirs   []string
	closed []bool

	mu sync.Mutex // protects following
	// promotedToken is the token counter each node saw in OnLeadership(true),
	// which raftnode calls only after its barrier.
	promotedToken map[string][]uint64
}

func newCluster(t *testing.T, size int, configure ...func(i int, cfg *Config)) *cluster {
	c := &cluster{t: t, promotedToken: map[string][]uint64{}}
	var peers []Peer
	for i := range size {
		addr, tr := raft.NewInmemTransport("")
		c.trans = append(c.trans, tr)
		peers = append(peers, Peer{ID: fmt.Sprint("n", i+1), RaftAddr: string(addr)})
	}
	for i, a := range c.trans {
		for j, b := range c.trans {
			if i != j {
				a.Connect(b.LocalAddr(), b)
			}
		}
	}
	for i := range size {
		c.dirs = append(c.dirs, t.TempDir())
		cfg := testConfig(t, c.dirs[i])
		cfg.NodeID = peers[i].ID
		cfg.Transport = c.trans[i]
		cfg.Bootstrap = peers
		for _, f := range configure {
			f(i, &cfg)
		}
		var self *Node
		var selfMu sync.Mutex
		cfg.OnLeadership = func(leader bool) {
			if !leader {
				return
			}
			selfMu.Lock()
			n := self
			selfMu.Unlock()
			if n == nil {
				return
			}
			_, token := state(t, n)
			c.mu.Lock()
			c.promotedToken[n.ID()] = append(c.promotedToken[n.ID()], token)
			c.mu.Unlock()
		}
		n := open(t, cfg)
		selfMu.Lock()
		self = n
		selfMu.Unlock()
		c.nodes = append(c.nodes, n)
		c.closed = append(c.closed, false)
	}
	return c
}

func (c *cluster) live() []*Node {
	var out []*Node
	for i, n := range c.nodes {
		if !c.closed[i] {
			out = append(out, n)
		}
	}
	return out
}

// kill closes node n and cuts it off, as a crash would.
func (c *cluster) kill(n *Node) {
	c.t.Helper()
	for i, m := range c.nodes {
		if m == n {
			if err := n.Close(); err != nil {
				c.t.Fatal(err)
			}
			c.closed[i] = true
			for j, tr := range c.trans {
				if j != i {
					tr.Disconnect(c.trans[i].LocalAddr())
				}
			}
		}
	}
}

// converge waits until every live node's state equals leader's.
func (c *cluster) converge(leader *Node) {
	c.t.Helper()
	want, _ := state(c.t, leader)
	for _, n := range c.live() {
		eventually(c.t, "node "+n.ID()+" to converge", func() bool {
			got, _ := state(c.t, n)
			return bytes.Equal(got, want)
		})
	}
}

// TestCluster: writes on the leader reach every node; followers refuse
// writes and linearizable reads; after the leader dies a new one is
// elected, its state already holds every acknowledged write, and the token
// counter continues above every token issued.
func TestCluster(t *testing.T) {
	c := newCluster(t, 3)
	leader := waitLeader(t, c.nodes...)
	last := populate(t, leader)
	c.converge(leader)
	for _, n := range c.nodes {
		checkPopulated(t, n)
		if n == leader {
			continue
		}
		if _, err := n.Apply(ctxT(t), create("x", 5000)); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("Apply on follower %s: %v, want ErrNotLeader", n.ID(), err)
		}
		if err := n.ReadIndex(ctxT(t)); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("ReadIndex on follower %s: %v, want ErrNotLeader", n.ID(), err)
		}
		if id, _ := n.Leader(); id != leader.ID() {
			t.Fatalf("follower %s thinks the leader is %q, want %s", n.ID(), id, leader.ID())
		}
	}

	// Kill the leader: one of the two others takes over.
	old := leader
	c.kill(old)
	leader = waitLeader(t, c.live()...)
	if leader == old {
		t.Fatal("the dead node is still the leader")
	}
	// OnLeadership(true) runs after the barrier: the state it reads
	// already holds every write the old leader acknowledged.
	eventually(t, "OnLeadership(true) on the new leader", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.promotedToken[leader.ID()]) > 0
	})
	c.mu.Lock()
	promoted := c.promotedToken[leader.ID()]
	c.mu.Unlock()
	if got := promoted[len(promoted)-1]; got != last {
		t.Fatalf("the new leader's state in OnLeadership has token counter %d, want %d", got, last)
	}
	if err := leader.ReadIndex(ctxT(t)); err != nil {
		t.Fatalf("ReadIndex on the new leader: %v", err)
	}
	checkPopulated(t, leader)
	mustApply(t, leader, create("s9", 5000))
	res := mustApply(t, leader, acquire("after", "s9", 0))
	if got := res.Holding.GetToken(); got <= last {
		t.Fatalf("first grant by the new leader has token %d, not above %d", got, last)
	}
	c.converge(leader)

	// Kill it too: the last node has no quorum and must refuse writes.
	c.kill(leader)
	rest := c.live()[0]
	if _, err := rest.Apply(ctxT(t), create("s10", 5000)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Apply on a node without quorum: %v, want ErrNotLeader", err)
	}
}
