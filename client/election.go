package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"time"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
)

// An election is a lock whose holding carries a value: the candidates
// queue for the name in FIFO order, the holder is the leader, its token is
// the leader's epoch (greater than every earlier leader's, so a resource
// that fences on it refuses a deposed leader), and Proclaim changes the
// value without giving up the name.

// Leadership is won by Campaign. It is lost when the session's lease may be
// lost (Done closes, cause ErrLeaseLost, no later than the session's local
// safe deadline: before the server can elect anybody else) or on Resign.
type Leadership struct {
	l *Lock

	mu    sync.Mutex // protects following
	value []byte
}

// Campaign waits in the election name's queue until this session is
// elected or ctx ends, and returns the leadership, carrying value. A
// session campaigning for a name it leads, with the value it last
// proclaimed, gets the same leadership; with another value, or for a name
// it holds as a plain or shared lock, Campaign fails with
// ErrInvalidArgument and changes nothing.
func (s *Session) Campaign(ctx context.Context, name string, value []byte) (*Leadership, error) {
	l, err := s.Acquire(ctx, name, withValue(value))
	if err != nil {
		return nil, err
	}
	return &Leadership{l: l, value: l.Holding().GetValue()}, nil
}

// Lock returns the holding behind the leadership.
func (e *Leadership) Lock() *Lock { return e.l }

// Name returns the election's name.
func (e *Leadership) Name() string { return e.l.Name() }

// Epoch returns the leader's fencing token: pass it with every write the
// leader makes.
func (e *Leadership) Epoch() uint64 { return e.l.Token() }

// Done is closed when the leadership may be lost or was resigned.
func (e *Leadership) Done() <-chan struct{} { return e.l.Done() }

// Context is cancelled when Done closes; context.Cause tells why
// (ErrLeaseLost, ErrSessionClosed, ErrReleased or ErrNotHolder).
func (e *Leadership) Context() context.Context { return e.l.Context() }

// Value returns the value last proclaimed.
func (e *Leadership) Value() []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.value
}

// Proclaim changes the leader's value without giving up leadership. It
// fails with ErrNotHolder when the leadership ended (and Done closes).
func (e *Leadership) Proclaim(ctx context.Context, value []byte) error {
	_, err := call(ctx, e.l.s.c, "proclaim "+e.Name(), locks, lsc.Proclaim,
		&pb.ProclaimRequest{Name: e.Name(), LeaseId: e.l.LeaseID(), Token: e.Epoch(), Value: value})
	if errors.Is(err, ErrNotHolder) {
		e.l.h.end(fmt.Errorf("%w: epoch %d of %q ended", ErrNotHolder, e.Epoch(), e.Name()))
		return err
	}
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.value = value
	e.mu.Unlock()
	return nil
}

// Resign gives up leadership: Done closes first (cause ErrReleased), then
// the next candidate in the queue is elected.
func (e *Leadership) Resign(ctx context.Context) error { return e.l.Release(ctx) }

// Leader returns the value and epoch of the current leader of name, or
// ErrNoLeader.
func (c *Client) Leader(ctx context.Context, name string, opts ...ReadOption) ([]byte, uint64, error) {
	info, err := c.Status(ctx, name, opts...)
	if err != nil {
		return nil, 0, err
	}
	h := info.GetHolder()
	if h == nil {
		return nil, 0, fmt.Errorf("%w for %q", ErrNoLeader, name)
	}
	return h.GetValue(), h.GetToken(), nil
}

// observeRetry is the pause before Observe subscribes again after its
// watch failed.
const observeRetry = 200 * time.Millisecond

// Observe yields the leader of the election name as (value, epoch): the
// current one, if any, then every change (a new leader, or a new value
// proclaimed), until ctx ends. When its watch fails (a node lost, a
// resync), Observe subscribes again and reads the leader, so the last pair
// it yields is always the current leader; a change undone while it
// resubscribes may go unseen. The error is that of the first subscription.
func (c *Client) Observe(ctx context.Context, name string) (iter.Seq2[[]byte, uint64], error) {
	first, err := c.Watch(ctx, name)
	if err != nil {
		return nil, err
	}
	return func(yield func([]byte, uint64) bool) {
		var (
			lastEpoch uint64
			lastValue string
			events    = first
		)
		emit := func(value []byte, epoch uint64) bool {
			if epoch < lastEpoch || epoch == lastEpoch && string(value) == lastValue {
				return true
			}
			lastEpoch, lastValue = epoch, string(value)
			return yield(value, epoch)
		}
		for ctx.Err() == nil {
			if events == nil {
				if events, err = c.Watch(ctx, name); err != nil {
					if !sleepCtx(ctx, observeRetry) {
						return
					}
					continue
				}
			}
			// Subscribed first, read second: no change falls in between.
			if v, epoch, err := c.Leader(ctx, name); err == nil && !emit(v, epoch) {
				return
			}
			for ev, err := range events {
				if err != nil {
					break
				}
				switch ev.GetType() {
				case pb.EventType_EVENT_TYPE_ACQUIRED, pb.EventType_EVENT_TYPE_PROCLAIMED:
					if ev.GetName() == name && !emit(ev.GetValue(), ev.GetToken()) {
						return
					}
				}
			}
			events = nil
			if !sleepCtx(ctx, observeRetry) {
				return
			}
		}
	}, nil
}

// sleepCtx waits d or until ctx ends, and reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Callbacks are called by RunElection.
type Callbacks struct {
	// OnStartedLeading runs on its own goroutine when this candidate is
	// elected. Its ctx ends (cause ErrLeaseLost) no later than the
	// session's local safe deadline, before another candidate can win, or
	// on resign (cause ErrReleased) when RunElection's ctx ends. It must
	// return once ctx ends.
	OnStartedLeading func(ctx context.Context)
	// OnStoppedLeading runs after OnStartedLeading returned.
	OnStoppedLeading func()
	// OnNewLeader runs, on a goroutine of its own, for every leader and
	// value observed (this candidate's included).
	OnNewLeader func(value []byte, epoch uint64)
}

// RunElection campaigns for name with value in session s until ctx ends,
// calling cb as leadership comes and goes; after a lost leadership it
// campaigns again while the session lives. It returns nil when ctx ended
// (resigning any leadership first), or the session's error when the
// session ended (ErrLeaseLost, ErrSessionClosed).
func RunElection(ctx context.Context, s *Session, name string, value []byte, cb Callbacks) error {
	var wg sync.WaitGroup
	octx, ocancel := context.WithCancel(ctx)
	defer wg.Wait()
	defer ocancel()
	if cb.OnNewLeader != nil {
		seq, err := s.c.Observe(octx, name)
		if err != nil {
			return err
		}
		wg.Go(func() {
			for v, epoch := range seq {
				cb.OnNewLeader(v, epoch)
			}
		})
	}
	for {
		lead, err := s.Campaign(ctx, name, value)
		if err != nil {
			if ctx.Err() != nil && s.Err() == nil {
				return nil
			}
			if serr := s.Err(); serr != nil {
				return serr
			}
			return err
		}
		started := make(chan struct{})
		go func() { // owned here: waited for below
			defer close(started)
			if cb.OnStartedLeading != nil {
				cb.OnStartedLeading(lead.Context())
			}
		}()
		select {
		case <-lead.Done():
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelWaitTimeout)
			_ = lead.Resign(rctx) // Done closes before the release is sent
			cancel()
		}
		<-started
		if cb.OnStoppedLeading != nil {
			cb.OnStoppedLeading()
		}
		if err := s.Err(); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}
