// Package simtest runs an N-node leasehold cluster inside one test
// process: every node is a real server.Server with its own data dir and API
// listener on 127.0.0.1, and the nodes replicate over raft's in-memory
// transport, so the harness can stop, restart and partition nodes quickly.
// Raft timeouts are short (200 ms) so elections take a fraction of a second.
package simtest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/internal/server"
)

// Options tune a Cluster.
type Options struct {
	// Configure, when set, edits each node's config before it opens.
	Configure func(id string, cfg *server.Config)
	// Logger for every node; default discards.
	Logger *slog.Logger
}

// Cluster is an in-process cluster. Methods are for one test goroutine.
type Cluster struct {
	t     testing.TB
	opts  Options
	Nodes []*Node
}

// Node is one member.
type Node struct {
	ID   string
	Addr string // API address on 127.0.0.1
	Dir  string

	c      *Cluster
	mu     sync.Mutex // protects following
	srv    *server.Server
	trans  *raft.InmemTransport
	cancel context.CancelFunc
	served chan error
}

// Start boots an n-node cluster bootstrapped with every node as a voter and
// waits for a leader. Every node is stopped in t.Cleanup.
func Start(t testing.TB, n int, opts Options) *Cluster {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c := &Cluster{t: t, opts: opts}
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		c.Nodes = append(c.Nodes, &Node{ID: id, Dir: t.TempDir(), c: c})
	}
	for _, nd := range c.Nodes {
		nd.newTransport()
	}
	c.connectAll()
	for _, nd := range c.Nodes {
		nd.open(true)
	}
	t.Cleanup(func() {
		for _, nd := range c.Nodes {
			nd.Stop()
		}
	})
	c.Leader()
	return c
}

func (n *Node) newTransport() {
	_, n.trans = raft.NewInmemTransport(raft.ServerAddress(n.ID))
}

func (c *Cluster) connectAll() {
	for _, a := range c.Nodes {
		for _, b := range c.Nodes {
			if a != b && a.trans != nil && b.trans != nil {
				a.trans.Connect(b.trans.LocalAddr(), b.trans)
			}
		}
	}
}

func (n *Node) open(bootstrap bool) {
	t := n.c.t
	t.Helper()
	addr := n.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("simtest: listen for %s: %v", n.ID, err)
	}
	n.Addr = ln.Addr().String()
	cfg := server.DefaultConfig(n.Dir, n.Addr)
	cfg.Logger = n.c.opts.Logger.With("node", n.ID)
	cfg.Raft.NodeID = n.ID
	cfg.Raft.Transport = n.trans
	cfg.Raft.HeartbeatTimeout = 200 * time.Millisecond
	cfg.Raft.ElectionTimeout = 200 * time.Millisecond
	cfg.Raft.LeaderLeaseTimeout = 100 * time.Millisecond
	cfg.Raft.CommitTimeout = 5 * time.Millisecond
	cfg.Lessor.Tick = 10 * time.Millisecond
	if bootstrap {
		for _, p := range n.c.Nodes {
			cfg.Raft.Bootstrap = append(cfg.Raft.Bootstrap, peer(p))
		}
	}
	if f := n.c.opts.Configure; f != nil {
		f(n.ID, &cfg)
	}
	srv, err := server.Open(cfg)
	if err != nil {
		_ = ln.Close()
		t.Fatalf("simtest: open %s: %v", n.ID, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	n.mu.Lock()
	n.srv, n.cancel, n.served = srv, cancel, served
	n.mu.Unlock()
}

// Server returns the node's server, or nil while it is stopped.
func (n *Node) Server() *server.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv
}

// Running reports whether the node is up.
func (n *Node) Running() bool { return n.Server() != nil }

// Stop shuts the node down (its data dir stays) and cuts it off the
// transport. Stopping a stopped node does nothing.
func (n *Node) Stop() {
	n.mu.Lock()
	srv, cancel, served := n.srv, n.cancel, n.served
	n.srv = nil
	n.mu.Unlock()
	if srv == nil {
		return
	}
	for _, o := range n.c.Nodes {
		if o != n && o.trans != nil {
			o.trans.Disconnect(n.trans.LocalAddr())
		}
	}
	cancel()
	<-served
	if err := srv.Close(); err != nil {
		n.c.t.Logf("simtest: close %s: %v", n.ID, err)
	}
}

// Restart starts a stopped node again on its data dir and API address.
func (n *Node) Restart() {
	n.c.t.Helper()
	if n.Running() {
		n.c.t.Fatalf("simtest: %s is running", n.ID)
	}
	n.newTransport()
	n.c.connectAll()
	n.open(false)
}

// Partition cuts the node off from every other node (both directions);
// its API stays reachable.
func (n *Node) Partition() {
	for _, o := range n.c.Nodes {
		if o != n {
			n.trans.Disconnect(o.trans.LocalAddr())
			o.trans.Disconnect(n.trans.LocalAddr())
		}
	}
}

// Heal reconnects every running node to every other.
func (c *Cluster) Heal() { c.connectAll() }

func peer(n *Node) server.Peer { return server.Peer{ID: n.ID, RaftAddr: string(n.trans.LocalAddr())} }

// Leader waits (up to 10 s) until exactly one running node leads and every
// running node agrees on it, and returns it.
func (c *Cluster) Leader() *Node {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var leader *Node
		agreed := true
		for _, n := range c.Nodes {
			srv := n.Server()
			if srv == nil {
				continue
			}
			if srv.Node().IsLeader() {
				leader = n
			}
			if id, _ := srv.Node().Leader(); id == "" {
				agreed = false
			}
		}
		if leader != nil && agreed {
			return leader
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.t.Fatalf("simtest: no leader within 10s")
	return nil
}

// Endpoints returns the running nodes' API addresses, comma-separated.
func (c *Cluster) Endpoints() string {
	var eps []string
	for _, n := range c.Nodes {
		eps = append(eps, n.Addr)
	}
	return strings.Join(eps, ",")
}

// Followers returns the running nodes that do not lead.
func (c *Cluster) Followers() []*Node {
	var out []*Node
	for _, n := range c.Nodes {
		if srv := n.Server(); srv != nil && !srv.Node().IsLeader() {
			out = append(out, n)
		}
	}
	return out
}
