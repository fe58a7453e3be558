package client

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
)

// Recipes are modes of the server's one FIFO queue per name, so every grant
// of every recipe carries its own fencing token:
//
//   - a lock (the default): one holder;
//   - a read/write lock: Shared() readers hold together, an exclusive
//     writer alone; a queued writer blocks every later reader, and its
//     token is above every reader's granted before it;
//   - a semaphore: WithPermits(n) lets n sessions hold the name at once,
//     each in its own slot (Lock.Slot) with its own token;
//   - an election (election.go): a lock whose holding carries a value.

// WithPermits makes the name a semaphore of n permits (n ≤ 1000): up to n
// sessions hold it at once, the others wait in FIFO order. Every request
// for a name must carry the same n while anyone holds or waits for it;
// another n fails with ErrInvalidArgument naming the current one.
func WithPermits(n uint32) AcquireOption {
	return func(o *acquireOptions) { o.permits = n }
}

// Shared asks for a read lock: shared holders hold the name together, and
// an exclusive (default) request is the write lock. It cannot be combined
// with WithPermits.
func Shared() AcquireOption {
	return func(o *acquireOptions) { o.mode = pb.LockMode_LOCK_MODE_SHARED }
}

// withValue sets the value the holding carries (Campaign).
func withValue(v []byte) AcquireOption {
	return func(o *acquireOptions) { o.value = v }
}

// Slot returns the permit the holding occupies: 0..n-1 for a semaphore of
// n permits (the lowest free one at grant), 0 otherwise.
func (l *Lock) Slot() uint32 { return l.h.holding.GetSlot() }

// SlotKey is the key under which a semaphore holder fences its own slot:
// the resource keeps one last token per slot, so the late holder of slot k
// is refused once the slot's next holder wrote. A plain lock's holders
// fence the name itself.
func (l *Lock) SlotKey() string { return SlotKey(l.Name(), l.Slot()) }

// SlotKey is the fenced key of slot k of the semaphore name: NAME/slot/K.
func SlotKey(name string, k uint32) string { return fmt.Sprintf("%s/slot/%d", name, k) }

// SessionInfo describes a live session (ListSessions).
type SessionInfo = pb.SessionInfo

// ListSessions describes the live sessions in lease id order, and whether
// more exist than were returned (ListLimit; the server returns at most
// 1000). Reads are linearizable unless Stale.
func (c *Client) ListSessions(ctx context.Context, opts ...ReadOption) ([]*SessionInfo, bool, error) {
	o := readOpts(opts)
	res, err := call(ctx, c, "list sessions", locks, lsc.ListSessions, &pb.ListSessionsRequest{Stale: o.stale, Limit: o.limit})
	if err != nil {
		return nil, false, err
	}
	return res.GetSessions(), res.GetTruncated(), nil
}

// RenewSession renews the session leaseID once and returns its TTL. It is
// for tools that keep alive a session another process created; a Session
// renews itself.
func (c *Client) RenewSession(ctx context.Context, leaseID string) (time.Duration, error) {
	res, err := call(ctx, c, "keepalive", asEndpoint, keepAliveOp, &pb.KeepAliveRequest{LeaseId: leaseID})
	if err != nil {
		return 0, err
	}
	return time.Duration(res.GetTtlMs()) * time.Millisecond, nil
}

// CloseSessionID ends the session leaseID, releasing its locks without
// lock-delay, and returns the names it released.
func (c *Client) CloseSessionID(ctx context.Context, leaseID string) ([]string, error) {
	res, err := call(ctx, c, "close session", asEndpoint, closeSessionOp, &pb.CloseSessionRequest{LeaseId: leaseID})
	if err != nil {
		return nil, err
	}
	return res.GetReleased(), nil
}

// WithWaitID makes Client.AcquireIn send id as the request's wait id
// instead of a fresh one: the retry of an AcquireIn whose outcome was
// unknown, from this process or another (that error names the id). The
// retry is answered with the holding the first request was granted, or
// waits in its place, and its withdrawal withdraws what that request
// created; a wait id its caller withdrew is refused with ErrCanceled. A
// Session chooses its own wait ids and refuses this option with
// ErrInvalidArgument.
func WithWaitID(id uint64) AcquireOption {
	return func(o *acquireOptions) { o.waitID = id }
}

// AcquireIn takes name in the existing session leaseID, which this client
// does not keep alive: with try it fails at once when the name is held,
// otherwise it waits in the queue until ctx ends. Like Session.Acquire, it
// withdraws a request whose outcome it did not learn; when that withdrawal
// fails too, the ErrOutcomeUnknown names the wait id to retry with
// (WithWaitID).
func (c *Client) AcquireIn(ctx context.Context, leaseID, name string, try bool, opts ...AcquireOption) (*Holding, error) {
	o := acquireOpts(opts)
	waitID := o.waitID
	if waitID == 0 {
		waitID = api.NewWaitID()
	}
	var (
		res interface{ GetHolding() *pb.Holding }
		err error
	)
	if try {
		res, err = call(ctx, c, "try acquire "+name, asEndpoint, tryAcquireOp, &pb.TryAcquireRequest{Name: name, LeaseId: leaseID,
			LockDelayMs: o.lockDelay.Milliseconds(), WaitId: waitID, Mode: o.mode, Permits: o.permits, Value: o.value})
	} else {
		res, err = call(ctx, c, "acquire "+name, asEndpoint, acquireOp, &pb.AcquireRequest{Name: name, LeaseId: leaseID,
			LockDelayMs: o.lockDelay.Milliseconds(), WaitId: waitID, Mode: o.mode, Permits: o.permits, Value: o.value})
	}
	if err != nil {
		if !definite(err) {
			err = c.withdraw(leaseID, name, waitID, err)
		}
		return nil, err
	}
	if err := o.check(name, res.GetHolding()); err != nil {
		return nil, err
	}
	return res.GetHolding(), nil
}
