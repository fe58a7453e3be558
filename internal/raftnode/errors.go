package raftnode

import "errors"

// Errors of Apply and ReadIndex.
var (
	// ErrNotLeader: this node is not the leader; nothing was applied.
	ErrNotLeader = errors.New("raftnode: not the leader")
	// ErrUnavailable: the command could not be proposed (queue full, no
	// quorum in time, or the context ended first); nothing was applied.
	ErrUnavailable = errors.New("raftnode: unavailable")
	// ErrOutcomeUnknown: the command was proposed but leadership was lost or
	// the context ended before it was known to commit; it may still apply.
	ErrOutcomeUnknown = errors.New("raftnode: outcome unknown")
	// ErrShutdown: the node is shutting down.
	ErrShutdown = errors.New("raftnode: shut down")
)

// Errors of Open and of membership changes.
var (
	// ErrNoState: the data dir holds no Raft state and the node was told
	// neither to bootstrap a new cluster nor to join one.
	ErrNoState = errors.New("raftnode: no state in the data dir")
	// ErrClusterFormed: the data dir holds no Raft state and the node was
	// told to found a cluster from a bootstrap list, but a voter of the
	// list holds that cluster's log: the cluster was formed before (this
	// node's data was lost, or it comes after the others founded it). It
	// must join the cluster instead.
	ErrClusterFormed = errors.New("raftnode: the cluster was formed before")
	// ErrClusterMismatch: a peer, a request or the data dir belongs to
	// another cluster (its cluster id differs).
	ErrClusterMismatch = errors.New("raftnode: cluster id mismatch")
	// ErrWouldLoseQuorum: the membership change would leave the voters
	// without a quorum of reachable members; nothing was changed.
	ErrWouldLoseQuorum = errors.New("raftnode: change would leave the voters without a quorum")
	// ErrDataDirInUse: another process (another leasehold server) has the
	// data dir open; nothing was changed.
	ErrDataDirInUse = errors.New("raftnode: data dir in use by another process")
	// ErrStandalone: the node runs without a Raft address (a single-node
	// group on an in-memory transport) and cannot have other members until
	// it is started again with one (Node.claimAddress).
	ErrStandalone = errors.New("raftnode: single node without a raft address")
)
