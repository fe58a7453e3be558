package client

import (
	"bytes"
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

	hmu    sync.Mutex           // protects following (never held while calling the server)
	held   map[string]*heldLock // by name: the holdings this session learned
	naming map[string]*nameLock // by name: the Acquire running in this session; nil when none runs
	// by name: the wait id of an attempt whose withdrawal failed, so that
	// the server may hold a grant of it that nobody learned; the next
	// attempt of the name is a retry of that request and sends it again
	unsettled map[string]uint64

	// ctx is cancelled, with cause lost, when the lease may be lost or the
	// session closed; lose then ends every held lock and running attempt
	// with the same cause, so neither needs a goroutine (nor a registry in
	// ctx) to follow the session.
	ctx    context.Context
	cancel context.CancelCauseFunc
	ka     kaState // the Client's keeper renews the session (see keepalive.go)
}

// nameLock lets one Acquire or TryAcquire of a name run at a time in a
// session; refs counts those running or waiting.
type nameLock struct {
	ch     chan struct{} // holds a token while one runs
	refs   int
	cancel context.CancelCauseFunc // ends the running attempt; nil when none runs
}

type sessionOptions struct {
	ttl       time.Duration
	owner     string
	drift     float64
	margin    time.Duration
	keepalive time.Duration

	sequencers bool // WithSequencers (sequencer.go)
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
	res, err := call(ctx, c, "create session", asEndpoint, createSessionOp, &pb.CreateSessionRequest{TtlMs: o.ttl.Milliseconds(), Owner: o.owner, Sequencers: o.sequencers})
	if err != nil {
		return nil, err
	}
	s := &Session{
		c: c, id: res.GetLeaseId(), ttl: time.Duration(res.GetTtlMs()) * time.Millisecond, owner: res.GetOwner(), opts: o,
		held: map[string]*heldLock{},
	}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
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
func (s *Session) Done() <-chan struct{} { return s.ctx.Done() }

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

// lose closes Done with cause err (first cause wins), and with it Done of
// every held lock and the context of every running attempt.
func (s *Session) lose(err error) {
	s.mu.Lock()
	if s.lost != nil {
		s.mu.Unlock()
		return
	}
	s.lost = err
	s.cancel(err)
	s.mu.Unlock()
	// hold and followSession check s.ctx after they record theirs, so
	// each ends here or there.
	s.hmu.Lock()
	defer s.hmu.Unlock()
	for _, h := range s.held {
		h.end(err)
	}
	for _, nl := range s.naming {
		if nl.cancel != nil {
			nl.cancel(err)
		}
	}
}

// Close stops the keepalive and ends the session on the server, releasing
// its locks without lock-delay. Done closes with ErrSessionClosed.
func (s *Session) Close(ctx context.Context) error {
	s.stopKeepalive()
	s.lose(ErrSessionClosed)
	_, err := call(ctx, s.c, "close session", asEndpoint, closeSessionOp, &pb.CloseSessionRequest{LeaseId: s.id})
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

// Lock is a view of one holding: (name, lease id, token). Every Lock the
// session returned for the same holding (re-entrant acquires) shares its
// Done and Context: they all close when the holding ends by any path.
//
// A session is not a mutex between its own goroutines: two goroutines that
// acquire the same name under one session both get the holding. Use one
// session per party that must exclude the others, or a sync.Mutex inside
// the process.
type Lock struct {
	s *Session
	h *heldLock
}

// heldLock is the client's record of one holding, shared by its Lock views.
type heldLock struct {
	holding *Holding
	ctx     context.Context // ended by the session's lose, with its cause
	cancel  context.CancelCauseFunc
}

// end closes Done of every view with cause (the first cause wins).
func (h *heldLock) end(cause error) { h.cancel(cause) }

// Name returns the lock name.
func (l *Lock) Name() string { return l.h.holding.GetName() }

// Token returns the fencing token: pass it with every write to the
// protected resource.
func (l *Lock) Token() uint64 { return l.h.holding.GetToken() }

// LeaseID returns the id of the session holding the lock.
func (l *Lock) LeaseID() string { return l.h.holding.GetLeaseId() }

// Holding returns the grant as the server described it.
func (l *Lock) Holding() *Holding { return l.h.holding }

// Done is closed when the lease may be lost or the holding ended (released
// through any Lock of it, or replaced by a newer grant to the session).
func (l *Lock) Done() <-chan struct{} { return l.h.ctx.Done() }

// Context is cancelled when Done closes; context.Cause tells why
// (ErrLeaseLost, ErrSessionClosed, ErrReleased or ErrNotHolder).
func (l *Lock) Context() context.Context { return l.h.ctx }

// AcquireOption configures Acquire and TryAcquire.
type AcquireOption func(*acquireOptions)

type acquireOptions struct {
	lockDelay time.Duration
	mode      pb.LockMode // see recipes.go
	permits   uint32
	value     []byte
	waitID    uint64 // WithWaitID; AcquireIn only
}

// WithLockDelay asks that after this holding ends by expiry (not by
// release), the name is not granted again for d (capped at 60 s).
func WithLockDelay(d time.Duration) AcquireOption {
	return func(o *acquireOptions) { o.lockDelay = d }
}

// Acquire takes the lock name, waiting in the server's FIFO queue until it
// is granted or ctx ends (ErrDeadlineExceeded or ErrCanceled; the queue
// entry is withdrawn). Acquiring a name the session already holds, in the
// same mode (and with the same value), returns another view of the same
// holding, so a retried Acquire never grants twice. Modes never mix: asking
// for a name the session holds or waits for in the other mode fails with
// ErrInvalidArgument and changes nothing (there is no upgrade from shared
// to exclusive: release the read lock, then acquire the write lock).
//
// A grant the caller never learned is never kept: each attempt carries a
// fresh wait id, and when Acquire ends in anything but a definite refusal
// (a deadline, a cancel, a lost reply, outcome-unknown) it withdraws that
// wait id, which also releases a grant that raced with giving up. If even
// the withdrawal fails, the error is ErrOutcomeUnknown, and the session's
// next Acquire of name sends that wait id again, so that it is a retry of
// the same request and its withdrawal still releases that grant. A
// withdrawal never releases a holding that another request of the session
// learned.
func (s *Session) Acquire(ctx context.Context, name string, opts ...AcquireOption) (*Lock, error) {
	o := acquireOpts(opts)
	return s.acquire(ctx, name, o, func(ctx context.Context, waitID uint64) (*pb.Holding, error) {
		res, err := call(ctx, s.c, "acquire "+name, asEndpoint, acquireOp, &pb.AcquireRequest{Name: name, LeaseId: s.id, LockDelayMs: o.lockDelay.Milliseconds(), WaitId: waitID,
			Mode: o.mode, Permits: o.permits, Value: o.value})
		return res.GetHolding(), err
	})
}

// TryAcquire takes the lock name if it is free now; otherwise it fails at
// once with ErrLocked (naming the holder) or ErrLockDelay. Like Acquire,
// it withdraws a grant whose answer it did not get.
func (s *Session) TryAcquire(ctx context.Context, name string, opts ...AcquireOption) (*Lock, error) {
	o := acquireOpts(opts)
	return s.acquire(ctx, name, o, func(ctx context.Context, waitID uint64) (*pb.Holding, error) {
		res, err := call(ctx, s.c, "try acquire "+name, asEndpoint, tryAcquireOp, &pb.TryAcquireRequest{Name: name, LeaseId: s.id, LockDelayMs: o.lockDelay.Milliseconds(), WaitId: waitID,
			Mode: o.mode, Permits: o.permits, Value: o.value})
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

// cancelWaitTimeout bounds the withdrawal of an attempt whose outcome the
// caller did not learn.
const cancelWaitTimeout = 5 * time.Second

func (s *Session) acquire(ctx context.Context, name string, o acquireOptions, do func(context.Context, uint64) (*pb.Holding, error)) (*Lock, error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	if o.waitID != 0 {
		return nil, opError("acquire "+name, &api.Error{Code: api.CodeInvalidArgument,
			Message: "WithWaitID is for Client.AcquireIn: a Session chooses its own wait ids and retries them itself"})
	}
	// One attempt per name at a time in this session: a withdrawal must
	// not release a holding a concurrent attempt of the session learned.
	unlock, err := s.lockName(ctx, name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	known := s.known(name) // a re-entrant acquire: never withdrawn
	// Stop waiting when the lease may be lost: a grant after that point
	// could not be used safely.
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer s.followSession(name, cancel)()
	waitID, unsettled := s.waitID(name)
	sent := time.Now()
	h, err := do(actx, waitID)
	if unsettled && errors.Is(err, ErrCanceled) && actx.Err() == nil {
		// The server refused the wait id as withdrawn: the withdrawal
		// that seemed to fail did apply, so nothing of the earlier
		// attempt is held. Ask again, as a new request.
		s.settle(name, waitID)
		waitID, _ = s.waitID(name)
		sent = time.Now()
		h, err = do(actx, waitID)
	}
	if err != nil {
		if !known && !definite(err) {
			err = s.withdraw(name, waitID, err)
		}
		if cause := context.Cause(actx); cause != nil && s.Err() != nil {
			return nil, cause
		}
		return nil, err
	}
	if err := o.check(name, h); err != nil {
		return nil, err
	}
	if !s.renewedAt(sent) {
		return nil, s.Err()
	}
	return s.hold(h), nil
}

// check refuses a grant h of name that is not what o asked for: another
// mode or another value. The server refuses such a request of a session
// that holds the name otherwise; a server that does not answers with the
// session's existing holding, which another caller may have learned, so
// nothing is withdrawn and the error says what the session holds.
func (o acquireOptions) check(name string, h *pb.Holding) error {
	var got string
	switch {
	case h.GetMode() != o.mode:
		got = fmt.Sprintf("it %s, the session holds it %s", modeWord(o.mode), modeWord(h.GetMode()))
	case !bytes.Equal(h.GetValue(), o.value):
		got = "another value than the session holds it with"
	default:
		return nil
	}
	return opError("acquire "+name, &api.Error{Code: api.CodeInvalidArgument,
		Message: fmt.Sprintf("asked for %s (token %d); release it first", got, h.GetToken())})
}

func modeWord(m pb.LockMode) string {
	if m == pb.LockMode_LOCK_MODE_SHARED {
		return "shared"
	}
	return "exclusive"
}

// definite reports whether err is a refusal that certainly granted nothing.
func definite(err error) bool {
	switch api.CodeOf(err) {
	case api.CodeInvalidArgument, api.CodeNotHolder, api.CodeStaleToken, api.CodeLeaseExpired, api.CodeLockDelay,
		api.CodeLocked, api.CodeResourceExhausted, api.CodePermissionDenied, api.CodeNotFound:
		return true
	}
	return false
}

// withdraw cancels the wait waitID (and releases its grant, if it was
// made) after an attempt that failed with err, and returns the error the
// caller sees: err, unless the withdrawal failed too (outcome-unknown), or
// succeeded after an unknown outcome (then nothing is held: unavailable).
//
// A withdrawal that failed leaves waitID unsettled: the server may hold a
// grant of it that nobody learned, which only a withdrawal naming that
// wait id releases (a holding another request of the session matched is
// never withdrawn). The session's next attempt of name sends waitID again
// (waitID), as a retry of the same request, so that its own withdrawal
// can still release that grant.
func (s *Session) withdraw(name string, waitID uint64, err error) error {
	err = s.c.withdraw(s.id, name, waitID, err)
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if api.CodeOf(err) != api.CodeOutcomeUnknown {
		delete(s.unsettled, name)
		return err
	}
	if s.unsettled == nil {
		s.unsettled = map[string]uint64{}
	}
	s.unsettled[name] = waitID
	return err
}

// waitID is the wait id of the next attempt of name: the unsettled one of
// an earlier attempt (unsettled true), or a fresh one.
func (s *Session) waitID(name string) (id uint64, unsettled bool) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if id, ok := s.unsettled[name]; ok {
		return id, true
	}
	return api.NewWaitID(), false
}

// settle forgets the unsettled wait id of name, which the server said
// was withdrawn.
func (s *Session) settle(name string, waitID uint64) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if s.unsettled[name] == waitID {
		delete(s.unsettled, name)
	}
}

// withdraw is Session.withdraw for the session leaseID.
func (c *Client) withdraw(leaseID, name string, waitID uint64, err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), cancelWaitTimeout)
	defer cancel()
	_, cerr := call(ctx, c, "withdraw "+name, asEndpoint, cancelWaitOp, &pb.CancelWaitRequest{Name: name, LeaseId: leaseID, WaitId: waitID})
	e := api.FromError(err)
	switch {
	case cerr != nil && !errors.Is(cerr, ErrLeaseExpired):
		return &api.Error{Code: api.CodeOutcomeUnknown, Message: fmt.Sprintf("%s; withdrawing failed too (%s): the session may hold %q until it ends; "+
			"to learn the outcome, retry with wait id %d (Client.AcquireIn with WithWaitID, or acquire --session %s --wait-id %d)", e.Message, api.FromError(cerr).Message, name, waitID, leaseID, waitID)}
	case e.Code == api.CodeOutcomeUnknown:
		return &api.Error{Code: api.CodeUnavailable, Message: e.Message + "; withdrawn: not holding " + name}
	}
	return err
}

// lockName waits until no other Acquire or TryAcquire of name runs in
// this session, or ctx ends; unlock lets the next one in.
func (s *Session) lockName(ctx context.Context, name string) (unlock func(), err error) {
	s.hmu.Lock()
	nl := s.naming[name]
	if nl == nil {
		if s.naming == nil {
			s.naming = map[string]*nameLock{}
		}
		nl = &nameLock{ch: make(chan struct{}, 1)}
		s.naming[name] = nl
	}
	nl.refs++
	s.hmu.Unlock()
	done := func() {
		s.hmu.Lock()
		if nl.refs--; nl.refs == 0 {
			delete(s.naming, name)
			if len(s.naming) == 0 {
				s.naming = nil // an idle session keeps no map
			}
		}
		s.hmu.Unlock()
	}
	select {
	case nl.ch <- struct{}{}:
		return func() { <-nl.ch; done() }, nil
	case <-ctx.Done():
		done()
		return nil, opError("acquire "+name, &api.Error{Code: ctxCode(ctx), Message: context.Cause(ctx).Error()})
	}
}

// followSession has lose end the running attempt of name (the caller
// holds its name lock) with cancel, until the returned func is called.
func (s *Session) followSession(name string, cancel context.CancelCauseFunc) (stop func()) {
	s.hmu.Lock()
	nl := s.naming[name]
	nl.cancel = cancel
	s.hmu.Unlock()
	if s.ctx.Err() != nil { // lost before it was recorded
		cancel(context.Cause(s.ctx))
	}
	return func() {
		s.hmu.Lock()
		nl.cancel = nil
		s.hmu.Unlock()
	}
}

// known reports whether the session holds name as far as it learned.
func (s *Session) known(name string) bool {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	h := s.held[name]
	return h != nil && h.ctx.Err() == nil
}

// hold returns a Lock view of the grant h: the holding the session already
// knows when the token matches, or a new one that replaces an older.
func (s *Session) hold(h *pb.Holding) *Lock {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	name := h.GetName()
	delete(s.unsettled, name) // learned now: never withdrawn
	if cur := s.held[name]; cur != nil {
		if cur.holding.GetToken() == h.GetToken() && cur.ctx.Err() == nil {
			return &Lock{s: s, h: cur}
		}
		// The session was granted name again, so the older holding ended.
		cur.end(fmt.Errorf("%w: the holding with token %d ended", ErrNotHolder, cur.holding.GetToken()))
	}
	lctx, lcancel := context.WithCancelCause(context.Background())
	hl := &heldLock{holding: h, ctx: lctx, cancel: lcancel}
	s.held[name] = hl
	// lost before it was recorded; s.ctx, not s.mu: hmu stays a leaf
	if s.ctx.Err() != nil {
		hl.end(context.Cause(s.ctx))
	}
	return &Lock{s: s, h: hl}
}

// forget drops h from the session's holdings, if it is still the one
// recorded for its name.
func (s *Session) forget(h *heldLock) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if name := h.holding.GetName(); s.held[name] == h {
		delete(s.held, name)
	}
}

// Release ends the holding. Done of every view closes first, with cause
// ErrReleased, so that the critical section stops before the name can
// pass to another session. It fails with ErrNotHolder when the holding is
// no longer current (the lease expired and the lock moved on), changing
// nothing.
func (l *Lock) Release(ctx context.Context) error {
	l.h.end(ErrReleased)
	l.s.forget(l.h)
	return l.s.c.Release(ctx, l.Name(), l.LeaseID(), l.Token())
}
