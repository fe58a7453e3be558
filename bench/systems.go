package main

import (
	"context"
	"errors"
	"time"
)

// A system is one lock service under test: a server process the harness
// starts and stops, and clients that lock the way its users do.
type system interface {
	Name() string
	// Start starts the server with its data in dir.
	Start(ctx context.Context, dir string) error
	// PIDs are the server processes (one per node), for their CPU time,
	// RSS and fsyncs.
	PIDs() []int
	// Stop stops the server.
	Stop() error
	// Dial returns a client connection; many sessions share one.
	Dial(ctx context.Context) (conn, error)
	// Sessions reports whether the system has sessions with a keepalive
	// (the sessions and churn workloads need them).
	Sessions() bool
}

type conn interface {
	// NewSession creates a session (a lease) with ttl, kept alive at ttl/3.
	NewSession(ctx context.Context, ttl time.Duration) (session, error)
	// Churn creates a lease, renews it once and ends it.
	Churn(ctx context.Context, ttl time.Duration) error
	Close() error
}

type session interface {
	// Lock waits for the lock name and returns its release.
	Lock(ctx context.Context, name string) (unlock func(context.Context) error, err error)
	// Alive reports whether the session still holds its lease.
	Alive() bool
	// Crash stops renewing without ending the lease, as a killed holder.
	Crash()
	Close(ctx context.Context) error
}

// A cluster is a system of several nodes whose leader can be killed.
type cluster interface {
	system
	// KillLeader finds the leader, kills its process with SIGKILL and
	// waits for it to exit. It returns the node's index for Restart and
	// the time of the kill.
	KillLeader(ctx context.Context) (int, time.Time, error)
	// Restart starts node i again with its data and waits until every
	// node is a member in good standing under one leader.
	Restart(ctx context.Context, i int) error
}

var errNoSessions = errors.New("no sessions")
