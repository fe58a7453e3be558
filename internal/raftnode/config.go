package raftnode

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/internal/fsm"
)

// Peer is one voter of a cluster being bootstrapped.
type Peer struct {
	ID       string
	RaftAddr string
}

// Config configures a Node.
type Config struct {
	// NodeID names this node in the cluster. Default "n1".
	NodeID string
	// DataDir holds wal/ (log and stable store; raft.db in a data dir
	// created before raft-wal) and snapshots/. Required.
	DataDir string
	// RaftAddr is the host:port raft listens on for peers. Empty runs a
	// single node on an in-memory transport (no port); a cluster needs it.
	RaftAddr string
	// Bootstrap lists the voters of a new cluster, this node included. It is
	// used only when DataDir holds no state; with a raft address and
	// several voters, the node founds the cluster only once every voter of
	// the list answered that it was never formed, else ErrClusterFormed
	// (see found.go; a caller's Transport skips that probe). A node with a raft address (or
	// a Transport) and no state starts only with Bootstrap or Join, never
	// by bootstrapping itself: a member whose data dir was lost would
	// otherwise form a cluster of its own (ErrNoState). Only the
	// standalone node (no RaftAddr, no Transport) bootstraps itself alone.
	Bootstrap []Peer
	// Join is true when this node will be added to a running cluster by
	// another node; it then starts without bootstrapping.
	Join bool
	// Rejoin, when set, is called instead of failing with
	// ErrClusterFormed when a voter of the Bootstrap list answers that the
	// cluster was formed (see found.go): it has this node added to the
	// cluster as a member that starts over, and returns the cluster id;
	// the node then starts as a joining node. May be nil.
	Rejoin func() (clusterID string, err error)
	// Abort, when closed, ends Open's wait for the voters of a Bootstrap
	// list (Open then fails with ErrShutdown). May be nil.
	Abort <-chan struct{}
	// ClusterID is the id of the cluster joined (learnt from it), required
	// with Join on an empty data dir. With existing state it is optional
	// and, when set, must equal the stored id (ErrClusterMismatch).
	ClusterID string
	// ForceNewCluster rewrites the stored configuration to this node
	// alone as the only voter, keeping its log, snapshots and state (its
	// token counter), and gives the cluster a new id, so that members of
	// the old configuration are refused. It is for the survivor of a
	// permanent loss of quorum; a node whose configuration is already
	// itself alone starts unchanged.
	ForceNewCluster bool
	// PeerTLS, when set, runs every Raft connection inside TLS with this
	// config (server and client side; set ClientAuth for mutual TLS).
	PeerTLS *tls.Config
	// PeerSecret, when set, is the node secret every Raft peer must prove
	// it knows (a challenge-response, see peerauth.go) before it is heard.
	PeerSecret []byte
	// Transport overrides the transport (tests: raft.InmemTransport).
	Transport raft.Transport
	// Stores, when set, replaces the data dir's log, stable and snapshot
	// stores (the simulation's in-memory stores; see Stores).
	Stores *Stores
	// Limits bound the state machine; every node must use the same.
	Limits fsm.Limits
	// Observer is called after every applied entry (may be nil).
	Observer func(index uint64, res *fsm.Result)
	// OnRestore is called (on the goroutine that calls Observer) after the
	// state was replaced by a snapshot: the entries it covers were never
	// observed here. index is the snapshot's log index (0 when not known):
	// the next entry observed is index+1. May be nil.
	OnRestore func(index uint64)
	// OnLeadership is called (from one goroutine, in order) when this node
	// becomes leader — after a barrier, so every earlier entry is applied —
	// and when it stops being leader. May be nil.
	OnLeadership func(leader bool)
	// Timing. Defaults: heartbeat and election 500 ms, leader lease 250 ms,
	// commit 25 ms. LeaderLeaseTimeout is also the grace a new leader's
	// lessor must add (see lessor.Config.Grace).
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// SnapshotInterval and SnapshotThreshold: raft checks every interval
	// whether threshold entries were appended since the last snapshot.
	// Defaults 30 s and 8192. TrailingLogs entries stay after compaction
	// (default 10240) so a briefly lagging follower needs no snapshot.
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	TrailingLogs      uint64
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Now is the wall clock the token floor of a restart is computed from
	// (see restore.go). Default time.Now.
	Now func() time.Time
	// Metrics receives log-append and FSM-apply timings (may be nil).
	Metrics Metrics
}

// DefaultConfig returns the defaults described on Config (DataDir unset).
func DefaultConfig() Config {
	return Config{
		NodeID:             "n1",
		Limits:             fsm.DefaultLimits(),
		HeartbeatTimeout:   500 * time.Millisecond,
		ElectionTimeout:    500 * time.Millisecond,
		LeaderLeaseTimeout: 250 * time.Millisecond,
		CommitTimeout:      25 * time.Millisecond,
		SnapshotInterval:   30 * time.Second,
		SnapshotThreshold:  8192,
		TrailingLogs:       10240,
		Logger:             slog.Default(),
	}
}

// Validate reports an unusable Config.
func (c Config) Validate() error {
	switch {
	case c.NodeID == "":
		return errors.New("raftnode: NodeID is empty")
	case c.DataDir == "":
		return errors.New("raftnode: DataDir is empty")
	case c.Logger == nil:
		return errors.New("raftnode: Logger is nil")
	case c.RaftAddr == "" && c.Transport == nil && (len(c.Bootstrap) > 1 || c.Join):
		return errors.New("raftnode: a cluster needs a raft address (--raft-addr)")
	case c.LeaderLeaseTimeout <= 0 || c.LeaderLeaseTimeout > c.HeartbeatTimeout:
		return errors.New("raftnode: LeaderLeaseTimeout must be in (0, HeartbeatTimeout]")
	case c.Join && len(c.Bootstrap) > 0:
		return errors.New("raftnode: Join and Bootstrap exclude each other")
	case c.ForceNewCluster && (c.Join || len(c.Bootstrap) > 0):
		return errors.New("raftnode: ForceNewCluster excludes Join and Bootstrap")
	case c.ClusterID != "" && !validClusterID(c.ClusterID):
		return fmt.Errorf("raftnode: %q is not a cluster id (32 hex digits)", c.ClusterID)
	}
	if len(c.Bootstrap) > 0 {
		self := false
		for _, p := range c.Bootstrap {
			self = self || p.ID == c.NodeID
		}
		if !self {
			return fmt.Errorf("raftnode: bootstrap list does not include this node %q", c.NodeID)
		}
	}
	return nil
}
