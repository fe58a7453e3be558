// Package raftnode runs leasehold's state machine on hashicorp/raft: a
// log and stable store fsync'd on every append batch (raft-wal; raft-boltdb
// for a data dir created before it, see openStore), file snapshots, bootstrap and membership, and Apply with a context.
//
// Membership cannot fork the cluster: a node never bootstraps implicitly
// (an empty data dir needs Bootstrap or Join, see Config.Bootstrap); the
// cluster id created at bootstrap is stored in the data dir and checked by
// a handshake on every Raft connection (stream.go); new members join as
// non-voters and a change of the voter set that would leave no quorum of
// reachable voters is refused (membership.go); ForceNewCluster recovers
// from a permanent loss of quorum under a new id (recover.go).
//
// A single node is a Raft group of one, on the same code path as a cluster.
// Commands from concurrent callers are batched by raft into one log append
// (one fsync for many commands). The state machine (fsm.Machine) is guarded
// by one RWMutex: Apply and the swap at the end of Restore take it for
// writing; Read, and Snapshot while it captures a view, for reading (the
// view is written to disk without the lock, see fsm.go). The Observer is
// called after each entry is applied, in log order, without that lock
// held; it must not block. A node that started from existing state raises
// the token floor when it first leads (see restore.go).
package raftnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/internal/failpoint"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// Node is one member of the Raft group and its applied state machine.
type Node struct {
	cfg       Config
	raft      *raft.Raft
	store     logStore
	trans     raft.Transport
	fsm       *raftFSM
	clusterID string
	health    peerHealth
	storage   *storageGuard

	// barrierTerm is the last term in which this node, as leader, applied
	// its barrier: every entry of earlier terms is applied. ReadIndex waits
	// for it to equal the current term.
	barrierTerm atomic.Uint64
	// confirm runs the rounds of ConfirmLeadership (confirm.go).
	confirm confirmer
	// hlog is raft's logger (log.go).
	hlog *hclogAdapter
	// floorPending is true while this node, started from existing state,
	// has not yet raised the token floor as leader (see restore.go).
	floorPending atomic.Bool

	wg      sync.WaitGroup
	done    chan struct{} // closed by Close: stops watchLeadership
	closeMu sync.Mutex    // protects following
	closed  bool
}

// Open opens (or creates) the node's data dir and starts raft.
func Open(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("raftnode: data dir: %w", err)
	}
	hlog := newHCLogger(cfg.Logger)
	store, snaps, err := openStores(cfg, hlog)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, store: store, hlog: hlog, done: make(chan struct{}), fsm: &raftFSM{m: fsm.New(cfg.Limits), observer: cfg.Observer, onRestore: cfg.OnRestore, metrics: cfg.Metrics}}
	n.health.failing = map[raft.ServerID]time.Time{}
	ok := false
	defer func() {
		if !ok {
			_ = store.Close()
			if n.trans != nil {
				closeTransport(n.trans)
			}
		}
	}()
	n.storage = newStorageGuard(cfg.Logger, cfg.DataDir)
	kept, marking, follow := KeepSuffixOnInstall(guardedLogStore{store, n.storage}, snaps, cfg.Logger)
	logs, err := raft.NewLogCache(512, withMetrics(withFailpoints(kept), cfg.Metrics))
	if err != nil {
		return nil, err
	}
	n.fsm.snapshotIndex = func() uint64 {
		if metas, err := snaps.List(); err == nil && len(metas) > 0 {
			return metas[0].Index // newest first
		}
		return 0
	}
	existing, err := raft.HasExistingState(logs, store, snaps)
	if err != nil {
		return nil, fmt.Errorf("raftnode: inspect state: %w", err)
	}
	stored, err := readClusterID(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if cfg.ForceNewCluster && existing {
		alone, err := aloneInConfig(cfg, logs, store, snaps, hlog)
		if err != nil {
			return nil, err
		}
		if alone {
			cfg.Logger.Info("force-new-cluster: the configuration already is this node alone; starting unchanged", "node", cfg.NodeID)
			cfg.ForceNewCluster = false
			n.cfg.ForceNewCluster = false
		}
	}
	bootstrap := false
	n.clusterID, bootstrap, err = cfg.identity(existing, stored)
	if err != nil {
		return nil, err
	}
	var found *founding
	if bootstrap && len(cfg.Bootstrap) > 1 && cfg.Transport == nil {
		if n.clusterID, found, err = cfg.decideFounding(n.clusterID); err != nil {
			return nil, err
		}
		bootstrap = found != nil
	}
	if n.clusterID != stored {
		// Before bootstrap: a crash in between leaves an id and no state,
		// which the next start with the same flags reuses or replaces.
		if err := writeClusterID(cfg.DataDir, n.clusterID); err != nil {
			return nil, err
		}
	}

	selfAddr := raft.ServerAddress(cfg.RaftAddr)
	switch {
	case cfg.Transport != nil:
		n.trans = cfg.Transport
		selfAddr = cfg.Transport.LocalAddr()
	case cfg.RaftAddr == "":
		selfAddr, n.trans = raft.NewInmemTransport(raft.ServerAddress(cfg.NodeID))
	default:
		sl, err := newStreamLayer(cfg.RaftAddr, cfg.PeerTLS, cfg.PeerSecret, n.clusterID, cfg.NodeID, cfg.Logger)
		if err != nil {
			return nil, err
		}
		sl.formed, sl.founding = n.formed, found
		n.trans = newNetworkTransport(sl, hlog)
	}

	// raft sends through acked, which numbers its AppendEntries for
	// ConfirmLeadership; n.trans stays the transport this node closes.
	acked, acks := wrapAcks(n.trans)
	n.confirm = confirmer{n: n, acks: acks, calls: make(chan *confirmCall)}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = hlog
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = cfg.TrailingLogs
	// BatchApplyCh stays off: with it, raft buffers futures in applyCh and
	// never answers those still buffered at Shutdown, so a Barrier or Apply
	// racing Close would wait forever (and Close with it). The leader loop
	// still batches every proposal that is waiting to be sent into one
	// append, so concurrent callers share an fsync either way.
	rc.BatchApplyCh = false
	notify := make(chan bool, 16)
	rc.NotifyCh = notify

	if cfg.ForceNewCluster {
		if err := n.forceNewCluster(rc, logs, snaps, selfAddr); err != nil {
			return nil, err
		}
	}
	n.floorPending.Store(existing)
	if bootstrap {
		peers := cfg.Bootstrap
		if len(peers) == 0 {
			peers = []Peer{{ID: cfg.NodeID, RaftAddr: string(selfAddr)}}
		}
		var conf raft.Configuration
		for _, p := range peers {
			conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
		}
		if err := raft.BootstrapCluster(rc, logs, store, snaps, acked, conf); err != nil {
			return nil, fmt.Errorf("raftnode: bootstrap: %w", err)
		}
	}
	r, err := raft.NewRaft(rc, n.fsm, logs, guardedStableStore{store, n.storage}, marking, acked)
	if err != nil {
		return nil, fmt.Errorf("raftnode: start raft: %w", err)
	}
	n.raft = r
	follow(r)
	ok = true
	obs := make(chan raft.Observation, 64)
	r.RegisterObserver(raft.NewObserver(obs, false, healthFilter))
	n.wg.Go(func() { n.health.watch(obs, n.done) })
	n.wg.Go(func() { n.watchLeadership(notify) })
	n.wg.Go(func() { n.confirm.run(n.done) })
	n.cfg.Logger.Info("raft node open", "node", cfg.NodeID, "cluster_id", n.clusterID, "bootstrapped", bootstrap)
	return n, nil
}

func (n *Node) watchLeadership(notify <-chan bool) {
	leader := false
	for {
		var isLeader bool
		select {
		case isLeader = <-notify:
		case <-n.done:
			if leader && n.cfg.OnLeadership != nil {
				n.cfg.OnLeadership(false)
			}
			return
		}
		if isLeader == leader {
			continue
		}
		if isLeader && (!n.barrier() || !n.raiseFloor()) {
			continue // leadership is gone (a false notification follows) or closing
		}
		if isLeader {
			n.claimAddress()
		}
		leader = isLeader
		failpoint.Leading(leader)
		n.cfg.Logger.Info("leadership changed", "node", n.cfg.NodeID, "leader", leader)
		if n.cfg.OnLeadership != nil {
			n.cfg.OnLeadership(leader)
		}
	}
}

// barrier applies every entry of earlier terms before the lessor reads the
// state. It retries while this node still leads — raft does not notify
// again while leadership lasts, so giving up would leave a leader without
// a lessor — and reports false when leadership or the node is gone.
func (n *Node) barrier() bool {
	for n.raft.State() == raft.Leader {
		term := n.raft.CurrentTerm()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := n.await(ctx, n.raft.Barrier(10*time.Second))
		cancel()
		if errors.Is(err, ErrShutdown) {
			return false
		}
		if err == nil {
			n.barrierTerm.Store(term)
			return true
		}
		n.cfg.Logger.Warn("leader barrier failed", "err", err)
		select {
		case <-n.done:
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
	return false
}

// Apply proposes cmd and waits until it is applied, ctx ends, or raft fails.
// A nil error means the command is committed (durable on a quorum) and
// applied here; the Result may still hold a business refusal.
// Errors: ErrNotLeader (not applied; another node leads), ErrUnavailable
// (not applied), ErrOutcomeUnknown (may or may not be applied), ErrShutdown.
func (n *Node) Apply(ctx context.Context, cmd *fsmpb.Command) (fsm.Result, error) {
	data, err := proto.Marshal(cmd)
	if err != nil {
		return fsm.Result{}, fmt.Errorf("raftnode: encode command: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fsm.Result{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if err := n.leaderErr(); err != nil {
		return fsm.Result{}, err
	}
	if err := n.waitFloor(ctx, cmd); err != nil {
		return fsm.Result{}, err
	}
	timeout := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	f := n.raft.Apply(data, timeout)
	if err := n.await(ctx, f); err != nil {
		switch {
		case errors.Is(err, errCtxDone):
			return fsm.Result{}, fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
		case errors.Is(err, ErrShutdown): // closed while the entry was in flight
			return fsm.Result{}, fmt.Errorf("%w: the node closed while the command was in flight", ErrOutcomeUnknown)
		case errors.Is(err, raft.ErrNotLeader):
			return fsm.Result{}, ErrNotLeader
		case errors.Is(err, raft.ErrEnqueueTimeout), errors.Is(err, raft.ErrLeadershipTransferInProgress):
			// Refused before the entry was appended.
			return fsm.Result{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
		case errors.Is(err, raft.ErrRaftShutdown):
			return fsm.Result{}, fmt.Errorf("%w: %w", ErrShutdown, err)
		default: // ErrLeadershipLost and anything after the entry was appended
			return fsm.Result{}, fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
		}
	}
	res, ok := f.Response().(*fsm.Result)
	if !ok {
		return fsm.Result{}, fmt.Errorf("raftnode: unexpected apply response %T", f.Response())
	}
	return *res, nil
}

// Read runs f with the applied state, under the state machine's read lock.
// f must not keep references to the state past its return.
func (n *Node) Read(f func(m *fsm.Machine)) {
	n.ReadAt(func(m *fsm.Machine, _ uint64) { f(m) })
}

// ReadAt is Read that also passes the log index the state is at: that of
// the last entry applied, or of the snapshot restored since; 0 when not
// known.
func (n *Node) ReadAt(f func(m *fsm.Machine, applied uint64)) {
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	f(n.fsm.m, n.fsm.applied)
}

// ReadIndex confirms this node is the leader and waits until every entry
// committed before the call is applied here, so a Read that follows sees
// every write acknowledged before ReadIndex was called (a linearizable read).
// The confirmation is ConfirmLeadership's: evidence gathered after the
// commit index was read, so a leader resumed from a pause never serves a
// read from what it knew before (confirm.go).
func (n *Node) ReadIndex(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if err := n.leaderErr(); err != nil {
		return err
	}
	// A new leader knows neither the commit index nor the applied state of
	// earlier terms until its barrier is applied (raft's AppliedIndex counts
	// entries handed to the FSM, not applied by it): until then a read could
	// miss writes acknowledged by the previous leader or before a restart.
	for n.barrierTerm.Load() != n.raft.CurrentTerm() {
		if err := n.leaderErr(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	commit := n.raft.CommitIndex()
	if err := n.ConfirmLeadership(ctx); err != nil {
		return err
	}
	for n.raft.AppliedIndex() < commit {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// errCtxDone marks a wait that ended because ctx did.
var errCtxDone = errors.New("raftnode: context done")

// await waits for f until ctx ends or the node is closed. raft can drop a
// future it already accepted when it shuts down (a committed entry on its
// way to the FSM goroutine), leaving f.Error blocked for good; the
// goroutine that waits on it then ends only with the process, and the
// caller is released by Close.
func (n *Node) await(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", errCtxDone, ctx.Err())
	case <-n.done:
		return ErrShutdown
	}
}

// leaderErr is nil on the leader, ErrShutdown on a closed node and
// ErrNotLeader otherwise.
func (n *Node) leaderErr() error {
	switch n.raft.State() {
	case raft.Leader:
		return nil
	case raft.Shutdown:
		return ErrShutdown
	}
	return ErrNotLeader
}

// Stopping tells the node that it is shutting down (Close follows): raft's
// complaints about peers that stop answering, which every node of a
// cluster stopped as a whole makes, are logged at Info from now on.
func (n *Node) Stopping() { n.hlog.stopping.Store(true) }

// IsLeader reports whether this node is the Raft leader right now.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Leader returns the current leader's id and raft address ("" when unknown).
func (n *Node) Leader() (id, raftAddr string) {
	addr, sid := n.raft.LeaderWithID()
	return string(sid), string(addr)
}

// ID returns this node's id.
func (n *Node) ID() string { return n.cfg.NodeID }

// Raft exposes the raft instance for membership administration and stats.
func (n *Node) Raft() *raft.Raft { return n.raft }

// Close shuts raft down and closes the stores. It is idempotent and waits.
func (n *Node) Close() error {
	n.closeMu.Lock()
	defer n.closeMu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	err := n.raft.Shutdown().Error()
	close(n.done)
	n.wg.Wait()
	closeTransport(n.trans)
	return errors.Join(err, n.store.Close())
}

func closeTransport(t raft.Transport) {
	if nt, ok := t.(networkTransport); ok {
		nt.CloseStreams() // the pooled outgoing connections
	}
	if c, ok := t.(io.Closer); ok {
		_ = c.Close()
	}
}

// RaftAddr returns the address peers reach this node's raft transport at.
func (n *Node) RaftAddr() string { return string(n.trans.LocalAddr()) }
