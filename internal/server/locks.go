package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/admission"
	"github.com/leasehold/leasehold/internal/authedge"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
	"github.com/leasehold/leasehold/internal/lessor"
	"github.com/leasehold/leasehold/internal/raftnode"
	"github.com/leasehold/leasehold/internal/validate"
)

// lockService implements leaseholdv1connect.LeaseholdServiceHandler.
type lockService struct{ s *Server }

type client = leaseholdv1connect.LeaseholdServiceClient

func (h *lockService) TryAcquire(ctx context.Context, req *connect.Request[pb.TryAcquireRequest]) (*connect.Response[pb.TryAcquireResponse], error) {
	m := req.Msg
	delay, err := validate.Acquire(m.GetName(), m.GetLeaseId(), m.GetLockDelayMs())
	if err == nil {
		err = checkMode(m.GetMode(), m.GetPermits(), m.GetValue())
	}
	if err != nil {
		return nil, api.ToConnect(err)
	}
	return onLeader(ctx, h.s, req, func(ctx context.Context, m *pb.TryAcquireRequest) (*pb.TryAcquireResponse, error) {
		res, err := h.s.acquire(ctx, acquireReq{name: m.GetName(), leaseID: m.GetLeaseId(), delay: delay, try: true, waitID: m.GetWaitId(), mode: m.GetMode(), permits: m.GetPermits(), value: m.GetValue()})
		if err != nil {
			return nil, err
		}
		return &pb.TryAcquireResponse{Holding: h.s.signed(res.Holding), TtlMs: res.TtlMs}, nil
	}, client.TryAcquire)
}

func acquireCmd(r acquireReq) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_Acquire{Acquire: &fsmpb.Acquire{Name: r.name, LeaseId: r.leaseID, LockDelayMs: r.delay.Milliseconds(), Try: r.try, WaitId: r.waitID,
		Mode: fsmpb.Mode(r.mode), Permits: r.permits, Value: r.value}}}
}

func (h *lockService) Acquire(ctx context.Context, req *connect.Request[pb.AcquireRequest]) (*connect.Response[pb.AcquireResponse], error) {
	m := req.Msg
	delay, err := validate.Acquire(m.GetName(), m.GetLeaseId(), m.GetLockDelayMs())
	if err != nil {
		return nil, api.ToConnect(err)
	}
	wait, err := validate.Wait(m.GetWaitMs())
	if err == nil {
		err = checkMode(m.GetMode(), m.GetPermits(), m.GetValue())
	}
	if err != nil {
		return nil, api.ToConnect(err)
	}
	return onLeader(ctx, h.s, req, func(ctx context.Context, m *pb.AcquireRequest) (*pb.AcquireResponse, error) {
		return h.s.acquire(ctx, acquireReq{name: m.GetName(), leaseID: m.GetLeaseId(), delay: delay, wait: wait, waitID: m.GetWaitId(), mode: m.GetMode(), permits: m.GetPermits(), value: m.GetValue()})
	}, h.s.forwardAcquire)
}

// forwardAcquire sends an Acquire to the leader and waits for its answer,
// which may come after a long wait in the queue. The leader decides the
// request as the principal this node names, so this node, which
// authenticated the caller, ends the call when an auth change leaves the
// caller without its credentials or its permission: the leader then
// withdraws the queued request as for any caller that went away.
func (s *Server) forwardAcquire(c client, ctx context.Context, req *connect.Request[pb.AcquireRequest]) (*connect.Response[pb.AcquireResponse], error) {
	ctx, stop := s.edge.Revocable(ctx, leaseholdv1connect.LeaseholdServiceAcquireProcedure, req.Msg)
	defer stop()
	res, err := c.Acquire(ctx, req)
	if revoked := authedge.Revoked(ctx); revoked != nil {
		return nil, revoked
	}
	return res, err
}

// acquireReq is one checked Acquire or TryAcquire.
type acquireReq struct {
	name, leaseID string
	delay         time.Duration
	wait          time.Duration // queue bound; 0: until ctx ends
	try           bool
	waitID        uint64 // the caller's id for CancelWait; 0: pick one
	mode          pb.LockMode
	permits       uint32
	value         []byte
}

// acquire grants r.name to r.leaseID or waits in its queue until the
// grant, the end of r.wait, the end of ctx, or the end of the session.
//
// A grant nobody learns is never kept. A wait that ends without a grant,
// a grant made when the caller is already gone, and a proposal whose
// outcome is unknown are all withdrawn with CancelWait, which also releases
// a grant that raced with the withdrawal. The one exception is a holding
// the session had before this request (a re-entrant acquire): its token is
// known to whoever acquired it first, so it is never withdrawn here.
func (s *Server) acquire(ctx context.Context, r acquireReq) (*pb.AcquireResponse, error) {
	if r.waitID == 0 {
		r.waitID = api.NewWaitID()
	}
	place, err := s.lim.ParkAcquire(ctx, r.leaseID, r.name, r.waitID, r.try) // before it is proposed (admission/queuecap.go)
	if err != nil {
		return nil, err
	}
	defer place.Release()
	var heldBefore, queued bool
	s.node.Read(func(m *fsm.Machine) {
		h, _, waiters := m.Standing(r.name, r.leaseID, r.waitID)
		heldBefore = h != nil
		queued = !r.try && !heldBefore && waiters > 0
	})
	if queued {
		// Behind others: it joins the queue with the next release (ride.go).
		if err := s.ride(ctx, r.name); err != nil {
			return nil, err
		}
	}
	withdraw := func() {
		if !heldBefore {
			s.cancelWait(r.name, r.leaseID, r.waitID)
		}
	}
	res, err := s.apply(ctx, acquireCmd(r))
	if errors.Is(err, raftnode.ErrOutcomeUnknown) {
		withdraw()
		return nil, err
	}
	if errors.Is(err, fsm.ErrLocked) || errors.Is(err, fsm.ErrLockDelay) {
		return nil, lockedErr(r.name, res.Contention)
	}
	if err != nil {
		return nil, err
	}
	owner := res.Session.GetOwner()
	holding := res.Holding
	place.Waits(res.Queued)
	if res.Queued {
		// Only a queued request waits for events. Its grant may have been
		// applied before w was registered, so it looks at the state once
		// before it waits for the first event.
		w := s.hub.Wait(r.name, r.leaseID)
		defer s.hub.Unwait(w)
		w.Signal()
		var timeout <-chan time.Time
		if r.wait > 0 {
			timeout = s.clock.After(r.wait)
		}
		authChanged := s.edge.Changed()
		for holding == nil {
			var why error
			select {
			case <-authChanged:
				// A revoked token or a changed policy: a caller no longer
				// allowed to wait leaves the queue before it is granted.
				authChanged = s.edge.Changed()
				why = s.edge.Recheck(ctx, leaseholdv1connect.LeaseholdServiceAcquireProcedure, &pb.AcquireRequest{Name: r.name, LeaseId: r.leaseID})
			case <-w.Wake():
				h, done, err := s.waitOutcome(r)
				if !done {
					continue
				}
				if err != nil {
					return nil, err // neither queued nor granted: nothing to withdraw
				}
				holding = h
				continue
			case <-timeout:
				why = api.Errorf(api.CodeDeadlineExceeded, "waited %s for %q", r.wait, r.name)
			case <-ctx.Done():
				why = ctxErr(ctx, "gave up waiting for %q", r.name)
			case <-s.drain:
				why = api.Errorf(api.CodeUnavailable, "server shutting down while waiting for %q", r.name)
			}
			if why != nil {
				withdraw()
				return nil, why
			}
		}
	}
	if ctx.Err() != nil {
		// Granted, but the caller is gone: nobody will learn the token.
		withdraw()
		return nil, ctxErr(ctx, "the caller gave up before the grant of %q was answered", r.name)
	}
	ttl, err := s.renewGranted(ctx, r.leaseID)
	if err != nil {
		var sess *fsmpb.Session
		s.node.Read(func(m *fsm.Machine) { sess = m.Session(r.leaseID) })
		if sess == nil {
			return nil, api.Errorf(api.CodeLeaseExpired, "session %s ended", r.leaseID)
		}
		// Granted, but no lessor of a leader renewed the session with it:
		// leadership moved, this lessor proposed the session's expiry
		// (which may never apply: a leader resumed from a pause expires
		// what its successor keeps), or its checkpoint could not be
		// cleared. The TTL the grant could promise is not known here (the
		// next leader may have the session checkpointed, shorter than a
		// full TTL), so neither is the grant's fate: withdraw it.
		withdraw()
		return nil, api.Errorf(api.CodeOutcomeUnknown, "granted %q, but the session %s could not be renewed with it (%v); the grant is withdrawn", r.name, r.leaseID, err)
	}
	return &pb.AcquireResponse{Holding: s.signed(holdingPB(r.name, holding, owner)), TtlMs: ttl.Milliseconds()}, nil
}

// renewGranted renews the session of a grant this leader committed and
// returns the TTL its answer may promise: the TTL the leader's own lessor
// will enforce from now. A leader elected a moment ago may commit a grant
// before its lessor is promoted (the barrier and the token floor come
// first); the renewal then waits for the promotion, as long as ctx and
// renewTimeout allow.
func (s *Server) renewGranted(ctx context.Context, leaseID string) (time.Duration, error) {
	ttl, err := s.lessor.RenewCommitted(leaseID)
	if !errors.Is(err, lessor.ErrNotLeader) || !s.node.IsLeader() {
		return ttl, err
	}
	t := s.clock.After(renewTimeout)
	select {
	case <-s.lessor.Promoted():
		return s.lessor.RenewCommitted(leaseID)
	case <-ctx.Done():
	case <-t:
	case <-s.drain:
	}
	return 0, err
}

// waitOutcome reads what became of the queued request r: granted (the
// holding), still queued (done false), or ended without a grant (an error).
// The applied state is the truth, however many events came and went.
func (s *Server) waitOutcome(r acquireReq) (holding *fsmpb.Holding, done bool, err error) {
	s.node.Read(func(m *fsm.Machine) {
		h, waiting, _ := m.Standing(r.name, r.leaseID, r.waitID)
		if h != nil && h.GetWaitId() == r.waitID {
			holding, done = h, true
			return
		}
		if waiting {
			return
		}
		done = true
		if m.Session(r.leaseID) == nil {
			err = api.Errorf(api.CodeLeaseExpired, "session %s ended while waiting for %q", r.leaseID, r.name)
			return
		}
		err = api.Errorf(api.CodeUnavailable, "the wait for %q was withdrawn or replaced by another request of the session; not holding it", r.name)
	})
	return holding, done, err
}

// lockedErr is the refusal of a TryAcquire, naming who holds the lock (its
// owner label and token, never its lease id: the caller may be another
// principal) or how long its lock-delay is, as the refusal found it.
func lockedErr(name string, c *fsm.Contention) error {
	switch {
	case c.Holders > 1:
		return api.Errorf(api.CodeLocked, "%q is held by %d holders (%d permits) and %d session(s) wait for it", name, c.Holders, c.Permits, c.Waiters)
	case c.Holders == 0 && c.DelayToken != 0:
		return api.Errorf(api.CodeLockDelay, "%q is in a lock-delay of %s after its holder (token %d) expired", name, time.Duration(c.DelayMs)*time.Millisecond, c.DelayToken)
	case c.Holders == 1 && c.Owner != "":
		return api.Errorf(api.CodeLocked, "%q is held by %q (token %d)", name, c.Owner, c.Token)
	case c.Holders == 1:
		return api.Errorf(api.CodeLocked, "%q is held by a session with no owner label (token %d)", name, c.Token)
	}
	return api.Errorf(api.CodeLocked, "%q is free but %d other session(s) wait for it", name, c.Waiters)
}

// ctxErr says why ctx ended: the caller's deadline or its cancellation,
// or the revocation of its credentials (revocable).
func ctxErr(ctx context.Context, format string, args ...any) error {
	if err := authedge.Revoked(ctx); err != nil {
		return err
	}
	code := api.CodeDeadlineExceeded
	if errors.Is(ctx.Err(), context.Canceled) {
		code = api.CodeCanceled
	}
	return api.Errorf(code, "%s: %v", fmt.Sprintf(format, args...), context.Cause(ctx))
}

// cancelWait withdraws a queue entry after the caller stopped waiting. It
// runs detached from the caller's context, which may already be over.
func (s *Server) cancelWait(name, leaseID string, waitID uint64) {
	ctx, cancel := context.WithTimeout(authedge.AsNode(context.Background()), 30*time.Second)
	defer cancel()
	req := connect.NewRequest(&pb.CancelWaitRequest{Name: name, LeaseId: leaseID, WaitId: waitID})
	for {
		// On the leader, or forwarded to it: leadership may have moved
		// while the request waited.
		_, err := onLeader(ctx, s, req, func(ctx context.Context, m *pb.CancelWaitRequest) (*pb.CancelWaitResponse, error) {
			return s.withdrawLocal(ctx, m, false)
		}, client.CancelWait)
		if err == nil || api.CodeOf(err) == api.CodeLeaseExpired {
			return
		}
		s.cfg.Logger.Warn("withdraw from queue failed; retrying", "name", name, "lease_id", leaseID, "err", err)
		select {
		case <-ctx.Done():
			// The entry stays until its session ends; a grant it receives
			// is released when the session is closed or expires.
			return
		case <-s.drain:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// withdrawLocal withdraws the wait m names on this leader. remember (a
// caller's CancelWait) also has the session remember its wait id, so that
// the request, should it arrive later, is refused: its caller gave up on
// it. A withdrawal of this node's own, for a caller that went away (a cut
// stream, an unknown outcome), remembers nothing: that caller may still
// send the request again, as a retry.
func (s *Server) withdrawLocal(ctx context.Context, m *pb.CancelWaitRequest, remember bool) (*pb.CancelWaitResponse, error) {
	c := &fsmpb.CancelWait{Name: m.GetName(), LeaseId: m.GetLeaseId(), WaitId: m.GetWaitId()}
	cmd := &fsmpb.Command{Op: &fsmpb.Command_CancelWait{CancelWait: c}}
	if remember {
		cmd.Op = &fsmpb.Command_Withdraw{Withdraw: c}
	}
	if _, err := s.apply(ctx, cmd); err != nil {
		return nil, err
	}
	return &pb.CancelWaitResponse{}, nil
}

func (h *lockService) CancelWait(ctx context.Context, req *connect.Request[pb.CancelWaitRequest]) (*connect.Response[pb.CancelWaitResponse], error) {
	err := validate.Name(req.Msg.GetName())
	if err == nil {
		err = validate.LeaseID(req.Msg.GetLeaseId())
	}
	if err != nil {
		return nil, api.ToConnect(err)
	}
	return onLeader(ctx, h.s, req, func(ctx context.Context, m *pb.CancelWaitRequest) (*pb.CancelWaitResponse, error) {
		return h.s.withdrawLocal(ctx, m, true)
	}, client.CancelWait)
}

func (h *lockService) Release(ctx context.Context, req *connect.Request[pb.ReleaseRequest]) (*connect.Response[pb.ReleaseResponse], error) {
	m := req.Msg
	if err := validate.Holding(m.GetName(), m.GetLeaseId(), m.GetToken()); err != nil {
		return nil, api.ToConnect(err)
	}
	return onLeader(ctx, h.s, req, func(ctx context.Context, m *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
		h.s.releasing(m.GetName())
		res, err := h.s.apply(ctx, &fsmpb.Command{Op: &fsmpb.Command_Release{Release: &fsmpb.Release{Name: m.GetName(), LeaseId: m.GetLeaseId(), Token: m.GetToken()}}})
		if err != nil {
			return nil, err
		}
		out := &pb.ReleaseResponse{}
		if res.Holding != nil {
			h.s.node.Read(func(fm *fsm.Machine) { out.Next = holdingPB(m.GetName(), res.Holding, fm.Owner(res.Holding.LeaseId)) })
		}
		return out, nil
	}, client.Release)
}

func holdingPB(name string, h *fsmpb.Holding, owner string) *pb.Holding {
	if h == nil {
		return nil
	}
	return &pb.Holding{Name: name, LeaseId: h.GetLeaseId(), Token: h.GetToken(), Owner: owner, AcquiredUnixMs: h.GetAcquiredUnixMs(), LockDelayMs: h.GetLockDelayMs(),
		Mode: pb.LockMode(h.GetMode()), Slot: h.GetSlot(), Value: h.GetValue()}
}

// read serves a read: linearizable on the leader (forwarded by a
// follower), or from this node's applied state when stale is set.
func read[Req, Res any](
	ctx context.Context, s *Server, req *connect.Request[Req], stale bool,
	local func(*Req) (*Res, error),
	remote func(client, context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
) (*connect.Response[Res], error) {
	if stale {
		res, err := local(req.Msg)
		if err != nil {
			return nil, api.ToConnect(toAPI(err))
		}
		return connect.NewResponse(res), nil
	}
	return onLeader(ctx, s, req, func(ctx context.Context, m *Req) (*Res, error) {
		admission.Yield(ctx) // confirming leadership is a wait, not work (admission/shares.go)
		if err := s.node.ReadIndex(ctx); err != nil {
			return nil, err
		}
		return local(m)
	}, remote)
}

func (h *lockService) Status(ctx context.Context, req *connect.Request[pb.StatusRequest]) (*connect.Response[pb.StatusResponse], error) {
	if err := validate.Name(req.Msg.GetName()); err != nil {
		return nil, api.ToConnect(err)
	}
	return read(ctx, h.s, req, req.Msg.GetStale(), func(m *pb.StatusRequest) (*pb.StatusResponse, error) {
		var info fsm.LockInfo
		owners := map[string]string{}
		h.s.node.Read(func(fm *fsm.Machine) {
			info = fm.Lock(m.GetName())
			for _, w := range info.Waiters {
				owners[w.LeaseId] = fm.Owner(w.LeaseId)
			}
		})
		return &pb.StatusResponse{Lock: h.s.lockInfoPB(info, owners)}, nil
	}, client.Status)
}

func (s *Server) lockInfoPB(info fsm.LockInfo, owners map[string]string) *pb.LockInfo {
	out := &pb.LockInfo{Name: info.Name, Holder: holdingPB(info.Name, info.Holder, info.Owner), RemainingMs: -1, Delayed: info.Delayed, Permits: max(info.Permits, 1)}
	for i, h := range info.Holders {
		hp := holdingPB(info.Name, h, info.Owners[i])
		hp.RemainingMs = -1
		if d, ok := s.lessor.Remaining(h.LeaseId); ok {
			hp.RemainingMs = d.Milliseconds()
		}
		out.Holders = append(out.Holders, hp)
	}
	if info.Holder != nil {
		if d, ok := s.lessor.Remaining(info.Holder.LeaseId); ok {
			out.RemainingMs = d.Milliseconds()
		}
	}
	for _, w := range info.Waiters {
		out.Waiters = append(out.Waiters, &pb.Waiter{LeaseId: w.LeaseId, Owner: owners[w.LeaseId], QueuedUnixMs: w.QueuedUnixMs})
	}
	return out
}

func (h *lockService) List(ctx context.Context, req *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	if err := validate.Prefix(req.Msg.GetPrefix()); err != nil {
		return nil, api.ToConnect(err)
	}
	if req.Msg.GetLimit() < 0 {
		return nil, api.ToConnect(api.Errorf(api.CodeInvalidArgument, "limit must be ≥ 0"))
	}
	return read(ctx, h.s, req, req.Msg.GetStale(), func(m *pb.ListRequest) (*pb.ListResponse, error) {
		limit := int(m.GetLimit())
		if limit == 0 || limit > validate.MaxListLimit {
			limit = validate.MaxListLimit
		}
		locks, truncated, err := h.s.list(ctx, m.GetPrefix(), limit) // watchstate.go
		if err != nil {
			return nil, err
		}
		return &pb.ListResponse{Locks: locks, Truncated: truncated}, nil
	}, client.List)
}

func (h *lockService) KvPut(ctx context.Context, req *connect.Request[pb.KvPutRequest]) (*connect.Response[pb.KvPutResponse], error) {
	m := req.Msg
	err := validate.Key(m.GetKey())
	if err == nil {
		err = validate.Token(m.GetToken())
	}
	if err == nil && len(m.GetValue()) > validate.MaxValueLen {
		err = api.Errorf(api.CodeInvalidArgument, "value is %d bytes; the limit is %d", len(m.GetValue()), validate.MaxValueLen)
	}
	if err != nil {
		return nil, api.ToConnect(err)
	}
	return onLeader(ctx, h.s, req, func(ctx context.Context, m *pb.KvPutRequest) (*pb.KvPutResponse, error) {
		// A write that cannot fit is refused before it costs a log entry.
		var full error
		h.s.node.Read(func(fm *fsm.Machine) { full = fm.CheckKVPut(m.GetKey(), m.GetValue()) })
		if full != nil {
			return nil, full
		}
		_, err := h.s.apply(ctx, &fsmpb.Command{Op: &fsmpb.Command_KvPut{KvPut: &fsmpb.KVPut{Key: m.GetKey(), Value: m.GetValue(), Token: m.GetToken(), Strict: m.GetStrict()}}})
		if err != nil {
			return nil, err
		}
		return &pb.KvPutResponse{Key: m.GetKey(), Token: m.GetToken()}, nil
	}, client.KvPut)
}

func (h *lockService) KvGet(ctx context.Context, req *connect.Request[pb.KvGetRequest]) (*connect.Response[pb.KvGetResponse], error) {
	if err := validate.Key(req.Msg.GetKey()); err != nil {
		return nil, api.ToConnect(err)
	}
	return read(ctx, h.s, req, req.Msg.GetStale(), func(m *pb.KvGetRequest) (*pb.KvGetResponse, error) {
		var e *fsmpb.KV
		h.s.node.Read(func(fm *fsm.Machine) { e = fm.KV(m.GetKey()) })
		if e == nil {
			return nil, api.Errorf(api.CodeNotFound, "key %q has no value", m.GetKey())
		}
		if e.GetDeleted() {
			return nil, api.Errorf(api.CodeNotFound, "key %q was deleted with token %d", m.GetKey(), e.GetToken())
		}
		return &pb.KvGetResponse{Key: e.GetKey(), Value: e.GetValue(), Token: e.GetToken()}, nil
	}, client.KvGet)
}

func (h *lockService) KvDelete(ctx context.Context, req *connect.Request[pb.KvDeleteRequest]) (*connect.Response[pb.KvDeleteResponse], error) {
	err := validate.Key(req.Msg.GetKey())
	if err == nil {
		err = validate.Token(req.Msg.GetToken())
	}
	if err != nil {
		return nil, api.ToConnect(err)
	}
	return onLeader(ctx, h.s, req, func(ctx context.Context, m *pb.KvDeleteRequest) (*pb.KvDeleteResponse, error) {
		_, err := h.s.apply(ctx, &fsmpb.Command{Op: &fsmpb.Command_KvDelete{KvDelete: &fsmpb.KVDelete{Key: m.GetKey(), Token: m.GetToken(), Strict: m.GetStrict()}}})
		if err != nil {
			return nil, err
		}
		return &pb.KvDeleteResponse{Key: m.GetKey(), Token: m.GetToken()}, nil
	}, client.KvDelete)
}
