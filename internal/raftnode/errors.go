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
