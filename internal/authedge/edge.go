// Package authedge is the glue between a request and the rules of package
// auth: it finds a request's principal from its connection and headers,
// decides and redacts in the connect interceptor, decides on the leader
// what the receiving node left undecided, and ends the open streams and
// queued acquires whose caller an auth change leaves without the right.
//
//	HTTP request ─► Edge.Authenticate (middleware): mTLS CN, bearer token, or the
//	                forwarded principal header when a node of this cluster sends it
//	             ─► Edge.Interceptor (connect): permission on the name, session
//	                ownership, lease ids redacted in answers; audit lines
//	leader       ─► Edge.DecideAtLeader: the rule the request's message names
//	auth change  ─► Edge.Observe ─► Edge.Revocable / Edge.Recheck decide again
//
// The rules are package auth's (Authenticator, Decide, Redact); this package
// reads the headers and the connection, keeps the principal in the
// context, maps a refusal to permission-denied and writes the audit lines.
// The policies are the replicated state (fsm auth.go) compiled by each node
// after every change (Edge.Observe), so a check never waits on Raft, and
// with auth disabled it is one atomic load and a branch. What it needs of
// the node (the applied state, its id and the cluster's, the limits' name
// of a caller) comes in through Config.
package authedge

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/fsm"
)

// Config is what an Edge needs of its node.
type Config struct {
	// NodeSecret is the cluster's node secret ("" for none).
	NodeSecret string
	// Admins are the principal names with the admin role (serve --admin).
	Admins []string
	// NodeID and ClusterID return this node's id and its cluster's, which
	// a forwarded request carries (SetForwardHeaders).
	NodeID    func() string
	ClusterID func() string
	// Read calls f with the applied state, read-locked: the auth state
	// after a restore, and the principal of each session.
	Read func(f func(m *fsm.Machine))
	// LimitsName returns the limits' name of an anonymous caller of ctx
	// ("ip:…"), which a forwarded request carries for it.
	LimitsName func(ctx context.Context) string
	// Audit receives the audit lines.
	Audit *slog.Logger
}

// Edge is a node's authentication and authorization glue. Its methods are
// safe for concurrent use.
type Edge struct {
	cfg    Config
	authr  auth.Authenticator            // finds the caller of a request
	pol    atomic.Pointer[auth.Policies] // the compiled policies; nil: disabled
	reload atomic.Bool                   // set by a restore: pol must be read from the state

	changeMu sync.Mutex    // protects following
	changed  chan struct{} // closed (and replaced) when the auth state changes
}

// New returns the Edge of a node.
func New(cfg Config) *Edge {
	e := &Edge{cfg: cfg}
	e.authr = auth.Authenticator{
		NodeSecret: cfg.NodeSecret,
		Admins:     cfg.Admins,
		ClusterID:  cfg.ClusterID,
		Policies:   e.Policies,
	}
	return e
}

// Policies returns the compiled auth state (nil: disabled).
func (e *Edge) Policies() *auth.Policies {
	if e.reload.Load() && e.reload.Swap(false) {
		var p *auth.Policies
		e.cfg.Read(func(m *fsm.Machine) { p = m.Auth() })
		e.pol.Store(p)
	}
	return e.pol.Load()
}

// Observe refreshes the compiled policies after an applied entry, or
// marks them for reading from the state after a restore (res nil), and
// wakes everything that decided on the previous auth state (Changed).
func (e *Edge) Observe(res *fsm.Result) {
	switch {
	case res == nil:
		e.reload.Store(true)
	case res.Auth != nil:
		e.pol.Store(res.Auth)
	default:
		return
	}
	e.changeMu.Lock()
	if e.changed != nil {
		close(e.changed)
	}
	e.changed = make(chan struct{})
	e.changeMu.Unlock()
}

// Changed returns a channel closed at the next change of the auth state
// (a token created or revoked, a policy set or deleted, the switch, a
// restore) applied on this node. A long-lived request takes it before it
// decides, and decides again (Recheck) when it is closed.
func (e *Edge) Changed() <-chan struct{} {
	e.changeMu.Lock()
	defer e.changeMu.Unlock()
	if e.changed == nil {
		e.changed = make(chan struct{})
	}
	return e.changed
}

// Recheck decides again, under the auth state as it is now, whether the
// caller of the long-lived request ctx may still do proc with msg: its
// credentials are authenticated again (a revoked token fails) and its
// permission decided again (a deleted policy fails). nil, or
// permission-denied.
func (e *Edge) Recheck(ctx context.Context, proc string, msg any) error {
	ctx, err := e.Reauthenticate(ctx, proc)
	if err != nil {
		return err
	}
	if pol := e.Policies(); pol.On() {
		return e.decideAudited(ctx, pol, proc, msg)
	}
	return nil
}

// Revocable returns a context that ends with a permission-denied cause
// (Revoked) as soon as an auth change applied on this node leaves the
// caller of ctx unable to do proc with msg. stop ends the watch and waits
// for its goroutine; call it when the request ends.
func (e *Edge) Revocable(ctx context.Context, proc string, msg any) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	changed := e.Changed()
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
			changed = e.Changed()
			if err := e.Recheck(ctx, proc, msg); err != nil {
				cancel(err)
				return
			}
		}
	}()
	return ctx, func() { cancel(nil); <-done }
}

// Revoked is the permission-denied error that ended ctx (Revocable), or
// nil when ctx did not end for that.
func Revoked(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	if err := context.Cause(ctx); api.CodeOf(err) == api.CodePermissionDenied {
		return api.ToConnect(err)
	}
	return nil
}
