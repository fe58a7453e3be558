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
	// PID is the server process, for its CPU time and RSS.
	PID() int
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

var errNoSessions = errors.New("no sessions")
