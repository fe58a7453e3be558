package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
)

// Session is one lease: a TTL kept alive by its Client's keepalive stream
// (one per Client, shared by all its sessions), under which any number of
// locks are held. Methods are safe for concurrent use.
type Session struct {
	c     *Client
	id    string
	ttl   time.Duration
	owner string
	opts  sessionOptions

	mu       sync.Mutex // protects following
	deadline time.Time  // the local safe deadline (monotonic)
	lost     error      // why Done closed (ErrLeaseLost wrapped, or ErrSessionClosed)

	done chan struct{} // closed when the lease may be lost or the session closed
	ka   kaState       // the Client's keeper renews the session (see keepalive.go)
}

type sessionOptions struct {
	ttl       time.Duration
	owner     string
	drift     float64
	margin    time.Duration
	keepalive time.Duration
}

// SessionOption configures NewSession.
type SessionOption func(*sessionOptions)

// WithTTL asks for a TTL (default 10 s). The server grants TTLs between 1 s
// and 1 h as asked and clamps others; Session.TTL is what it granted.
func WithTTL(d time.Duration) SessionOption { return func(o *sessionOptions) { o.ttl = d } }

// WithOwner sets the owner label operators see (default none).
func WithOwner(owner string) SessionOption { return func(o *sessionOptions) { o.owner = owner } }

// WithSafety sets the clock-rate drift the holder allows for (default
// 0.02, the server's default) and an extra margin (default 100 ms): the
// lease is considered lost at sent + TTL·(1−drift) − margin.
func WithSafety(drift float64, margin time.Duration) SessionOption {
	return func(o *sessionOptions) { o.drift, o.margin = drift, margin }
}

// WithKeepAliveInterval sets how often the session renews (default TTL/3).
func WithKeepAliveInterval(d time.Duration) SessionOption {
	return func(o *sessionOptions) { o.keepalive = d }
}

// NewSession creates a session and starts keeping it alive.
func (c *Client) NewSession(ctx context.Context, opts ...SessionOption) (*Session, error) {
	o := sessionOptions{ttl: 10 * time.Second, drift: 0.02, margin: 100 * time.Millisecond}
	for _, opt := range opts {
		opt(&o)
	}
	if o.drift < 0 || o.drift >= 1 || o.margin < 0 {
		return nil, &api.Error{Code: api.CodeInvalidArgument, Message: "client: drift must be in [0, 1) and margin ≥ 0"}
	}
	sent := time.Now()
	res, err := call(ctx, c, "client: create session", locks, lsc.CreateSession, &pb.CreateSessionRequest{TtlMs: o.ttl.Milliseconds(), Owner: o.owner})
	if err != nil {
		return nil, err
	}
	s := &Session{
		c: c, id: res.GetLeaseId(), ttl: time.Duration(res.GetTtlMs()) * time.Millisecond, owner: res.GetOwner(), opts: o,
		done: make(chan struct{}),
	}
	if s.opts.keepalive <= 0 {
		s.opts.keepalive = s.ttl / 3
	}
	s.deadline = s.safeDeadline(sent)
	c.keeper.add(s, sent)
	return s, nil
}

// ID returns the lease id.
func (s *Session) ID() string { return s.id }

// TTL returns the TTL the server granted.
func (s *Session) TTL() time.Duration { return s.ttl }

// Owner returns the owner label.
func (s *Session) Owner() string { return s.owner }

// Done is closed the moment the lease may be lost (the local safe deadline
// passed without a confirmed renewal, or the server said it expired) or the
// session was closed. Err tells which.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err returns nil while Done is open; then ErrLeaseLost (possibly wrapped
// with the reason) or ErrSessionClosed.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}

// Deadline returns the local safe deadline: until then the lease is
// certainly held, given bounded clock drift.
func (s *Session) Deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline
}

func (s *Session) safeDeadline(sent time.Time) time.Time {
	return sent.Add(s.ttl - time.Duration(float64(s.ttl)*s.opts.drift) - s.opts.margin)
}

// renewedAt records a renewal the server confirmed for a request sent at
// sent; the deadline only moves later. It reports false when the session
// is already lost: a lost session never comes back.
func (s *Session) renewedAt(sent time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost != nil {
		return false
	}
	if d := s.safeDeadline(sent); d.After(s.deadline) {
		s.deadline = d
	}
	return true
}

// lose closes Done with cause err (first cause wins).
func (s *Session) lose(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost != nil {
		return
	}
	s.lost = err
	close(s.done)
}

// Close stops the keepalive and ends the session on the server, releasing
// its locks without lock-delay. Done closes with ErrSessionClosed.
func (s *Session) Close(ctx context.Context) error {
	s.stopKeepalive()
	s.lose(ErrSessionClosed)
	_, err := call(ctx, s.c, "client: close session", locks, lsc.CloseSession, &pb.CloseSessionRequest{LeaseId: s.id})
	if errors.Is(err, ErrLeaseExpired) {
		return nil // already gone: nothing is held
	}
	return err
}

// Orphan stops the keepalive without ending the session: the server
// expires it after its TTL unless someone else renews it. Done closes at
// once, with ErrLeaseLost: this Session no longer knows whether it holds.
func (s *Session) Orphan() {
	s.stopKeepalive()
	s.lose(fmt.Errorf("%w: session orphaned", ErrLeaseLost))
}

func (s *Session) stopKeepalive() { s.c.keeper.remove(s) }

// Lock is one holding: (name, lease id, token).
type Lock struct {
	s       *Session
	holding *Holding
	ctx     context.Context
	cancel  context.CancelCauseFunc
	unwatch func() bool // stops the goroutine that ends ctx with the session
}

// Name returns the lock name.
func (l *Lock) Name() string { return l.holding.GetName() }

// Token returns the fencing token: pass it with every write to the
// protected resource.
func (l *Lock) Token() uint64 { return l.holding.GetToken() }

// LeaseID returns the id of the session holding the lock.
func (l *Lock) LeaseID() string { return l.holding.GetLeaseId() }

// Holding returns the grant as the server described it.
func (l *Lock) Holding() *Holding { return l.holding }

// Done is closed when the lease may be lost or the lock was released.
func (l *Lock) Done() <-chan struct{} { return l.ctx.Done() }

// Context is cancelled when Done closes; context.Cause tells why
// (ErrLeaseLost, ErrSessionClosed or ErrReleased).
func (l *Lock) Context() context.Context { return l.ctx }

// AcquireOption configures Acquire and TryAcquire.
type AcquireOption func(*acquireOptions)

type acquireOptions struct {
	lockDelay time.Duration
}

// WithLockDelay asks that after this holding ends by expiry (not by
// release), the name is not granted again for d (capped at 60 s).
func WithLockDelay(d time.Duration) AcquireOption {
	return func(o *acquireOptions) { o.lockDelay = d }
}

// Acquire takes the lock name, waiting in the server's FIFO queue until it
// is granted or ctx ends (ErrDeadlineExceeded; the queue entry is
// withdrawn). Acquiring a name the session already holds returns the same
// holding, so a retried Acquire never grants twice.
func (s *Session) Acquire(ctx context.Context, name string, opts ...AcquireOption) (*Lock, error) {
	o := acquireOpts(opts)
	return s.acquire(ctx, func(ctx context.Context) (*pb.Holding, error) {
		res, err := call(ctx, s.c, "client: acquire "+name, locks, lsc.Acquire, &pb.AcquireRequest{Name: name, LeaseId: s.id, LockDelayMs: o.lockDelay.Milliseconds()})
		return res.GetHolding(), err
	})
}

// TryAcquire takes the lock name if it is free now; otherwise it fails at
// once with ErrLocked or ErrLockDelay.
func (s *Session) TryAcquire(ctx context.Context, name string, opts ...AcquireOption) (*Lock, error) {
	o := acquireOpts(opts)
	return s.acquire(ctx, func(ctx context.Context) (*pb.Holding, error) {
		res, err := call(ctx, s.c, "client: try acquire "+name, locks, lsc.TryAcquire, &pb.TryAcquireRequest{Name: name, LeaseId: s.id, LockDelayMs: o.lockDelay.Milliseconds()})
		return res.GetHolding(), err
	})
}

func acquireOpts(opts []AcquireOption) acquireOptions {
	var o acquireOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

func (s *Session) acquire(ctx context.Context, do func(context.Context) (*pb.Holding, error)) (*Lock, error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	// Stop waiting when the lease may be lost: a grant after that point
	// could not be used safely.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(sessionCtx{s}, func() { cancel(s.Err()) })
	defer stop()
	sent := time.Now()
	h, err := do(ctx)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && s.Err() != nil {
			return nil, cause
		}
		return nil, err
	}
	if !s.renewedAt(sent) {
		return nil, s.Err()
	}
	lctx, lcancel := context.WithCancelCause(context.Background())
	l := &Lock{s: s, holding: h, ctx: lctx, cancel: lcancel}
	// sessionCtx is not a context of package context, so AfterFunc starts
	// a goroutine that lives until the session ends or unwatch is called.
	l.unwatch = context.AfterFunc(sessionCtx{s}, func() { lcancel(s.Err()) })
	return l, nil
}

// Release ends the holding. It fails with ErrNotHolder when the holding is
// no longer current (the lease expired and the lock moved on), changing
// nothing. Done closes with cause ErrReleased, or that ErrNotHolder error.
func (l *Lock) Release(ctx context.Context) error {
	err := l.s.c.Release(ctx, l.Name(), l.LeaseID(), l.Token())
	switch {
	case err == nil:
		l.cancel(ErrReleased)
		l.unwatch()
	case errors.Is(err, ErrNotHolder):
		l.cancel(err) // certainly not held any more
		l.unwatch()
	}
	return err
}

// sessionCtx is a context.Context that is done when the session is.
type sessionCtx struct{ s *Session }

func (c sessionCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c sessionCtx) Done() <-chan struct{}       { return c.s.done }
func (c sessionCtx) Err() error {
	select {
	case <-c.s.done:
		return context.Canceled
	default:
		return nil
	}
}
func (c sessionCtx) Value(any) any { return nil }
