package server

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
	"github.com/leasehold/leasehold/internal/lessor"
)

// lockService implements leaseholdv1connect.LeaseholdServiceHandler.
type lockService struct{ s *Server }

type client = leaseholdv1connect.LeaseholdServiceClient

func (h *lockService) CreateSession(ctx context.Context, req *connect.Request[pb.CreateSessionRequest]) (*connect.Response[pb.CreateSessionResponse], error) {
	ttl, err := grantTTL(req.Msg.GetTtlMs())
	if err == nil {
		err = checkOwner(req.Msg.GetOwner())
	}
	if err != nil {
		return nil, api.ToConnect(err)
	}
	return onLeader(ctx, h.s, req, func(ctx context.Context, m *pb.CreateSessionRequest) (*pb.CreateSessionResponse, error) {
		id := newLeaseID()
		if _, err := h.s.apply(ctx, &fsmpb.Command{Op: &fsmpb.Command_CreateSession{CreateSession: &fsmpb.CreateSession{LeaseId: id, TtlMs: ttl.Milliseconds(), Owner: m.GetOwner()}}}); err != nil {
			return nil, err
		}
		_, _ = h.s.lessor.Renew(id) // the TTL counts from this answer
		return &pb.CreateSessionResponse{LeaseId: id, TtlMs: ttl.Milliseconds(), Owner: m.GetOwner()}, nil
	}, client.CreateSession)
}

func (h *lockService) CloseSession(ctx context.Context, req *connect.Request[pb.CloseSessionRequest]) (*connect.Response[pb.CloseSessionResponse], error) {
	if err := checkLeaseID(req.Msg.GetLeaseId()); err != nil {
		return nil, api.ToConnect(err)
	}
	return onLeader(ctx, h.s, req, func(ctx context.Context, m *pb.CloseSessionRequest) (*pb.CloseSessionResponse, error) {
		res, err := h.s.apply(ctx, &fsmpb.Command{Op: &fsmpb.Command_CloseSession{CloseSession: &fsmpb.CloseSession{LeaseId: m.GetLeaseId()}}})
		if err != nil {
			return nil, err
		}
		return &pb.CloseSessionResponse{Released: res.Released}, nil
	}, client.CloseSession)
}

func (h *lockService) TryAcquire(ctx context.Context, req *connect.Request[pb.TryAcquireRequest]) (*connect.Response[pb.TryAcquireResponse], error) {
	m := req.Msg
	delay, err := checkAcquire(m.GetName(), m.GetLeaseId(), m.GetLockDelayMs())
	if err != nil {
		return nil, api.ToConnect(err)
	}
	return onLeader(ctx, h.s, req, func(ctx context.Context, m *pb.TryAcquireRequest) (*pb.TryAcquireResponse, error) {
		res, err := h.s.apply(ctx, acquireCmd(m.GetName(), m.GetLeaseId(), delay, true, 0))
		if err != nil {
			return nil, err
		}
		ttl, err := h.s.lessor.Renew(m.GetLeaseId())
		if err != nil {
			return nil, err
		}
		return &pb.TryAcquireResponse{Holding: holdingPB(m.GetName(), res.Holding, res.Session.GetOwner()), TtlMs: ttl.Milliseconds()}, nil
	}, client.TryAcquire)
}

func checkAcquire(name, leaseID string, delayMs int64) (time.Duration, error) {
	if err := checkName(name); err != nil {
		return 0, err
	}
	if err := checkLeaseID(leaseID); err != nil {
		return 0, err
	}
	return lockDelay(delayMs)
}

func acquireCmd(name, leaseID string, delay time.Duration, try bool, waitID uint64) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_Acquire{Acquire: &fsmpb.Acquire{Name: name, LeaseId: leaseID, LockDelayMs: delay.Milliseconds(), Try: try, WaitId: waitID}}}
}

func (h *lockService) Acquire(ctx context.Context, req *connect.Request[pb.AcquireRequest]) (*connect.Response[pb.AcquireResponse], error) {
	m := req.Msg
	delay, err := checkAcquire(m.GetName(), m.GetLeaseId(), m.GetLockDelayMs())
	if err != nil {
		return nil, api.ToConnect(err)
	}
	wait, err := checkWait(m.GetWaitMs())
	if err != nil {
		return nil, api.ToConnect(err)
	}
	return onLeader(ctx, h.s, req, func(ctx context.Context, m *pb.AcquireRequest) (*pb.AcquireResponse, error) {
		return h.s.acquire(ctx, m.GetName(), m.GetLeaseId(), delay, wait)
	}, client.Acquire)
}

// acquire grants name to leaseID or waits in its queue until the grant, the
// end of wait (0: no bound), the end of ctx, or the end of the session.
// A wait that ends without a grant withdraws from the queue with
// CancelWait, which also releases a grant that raced with the withdrawal,
// so a caller that was told "no" never holds the lock.
func (s *Server) acquire(ctx context.Context, name, leaseID string, delay, wait time.Duration) (*pb.AcquireResponse, error) {
	waitID := newWaitID()
	w := s.hub.wait(name, leaseID)
	defer s.hub.unwait(name, leaseID, w)
	res, err := s.apply(ctx, acquireCmd(name, leaseID, delay, false, waitID))
	if err != nil {
		return nil, err
	}
	owner := res.Session.GetOwner()
	holding := res.Holding
	if res.Queued {
		var timeout <-chan time.Time
		if wait > 0 {
			timeout = s.clock.After(wait)
		}
		var why error
	wait:
		for {
			select {
			case ev := <-w.ch:
				if ev.WaitID != waitID {
					continue // another request of this session, on the same name
				}
				if ev.Type == pb.EventType_EVENT_TYPE_ACQUIRED {
					holding = &fsmpb.Holding{LeaseId: leaseID, Token: ev.Token, AcquiredUnixMs: ev.UnixMs, LockDelayMs: delay.Milliseconds(), WaitId: waitID}
					break wait
				}
				return nil, api.Errorf(api.CodeLeaseExpired, "session %s ended while waiting for %q", leaseID, name)
			case <-timeout:
				why = api.Errorf(api.CodeDeadlineExceeded, "waited %s for %q", wait, name)
			case <-ctx.Done():
				why = api.Errorf(api.CodeDeadlineExceeded, "gave up waiting for %q: %v", name, context.Cause(ctx))
			case <-s.drain:
				why = api.Errorf(api.CodeUnavailable, "server shutting down while waiting for %q", name)
			}
			break
		}
		if why != nil {
			s.cancelWait(name, leaseID, waitID)
			return nil, why
		}
	}
	ttl, err := s.lessor.Renew(leaseID)
	if err != nil {
		if errors.Is(err, lessor.ErrNotLeader) {
			// Granted, but leadership moved: the new leader tracks the
			// session; report the TTL it was created with.
			var sess *fsmpb.Session
			s.node.Read(func(m *fsm.Machine) { sess = m.Session(leaseID) })
			if sess == nil {
				return nil, api.Errorf(api.CodeLeaseExpired, "session %s ended", leaseID)
			}
			ttl = time.Duration(sess.GetTtlMs()) * time.Millisecond
		} else {
			return nil, err
		}
	}
	return &pb.AcquireResponse{Holding: holdingPB(name, holding, owner), TtlMs: ttl.Milliseconds()}, nil
}

// cancelWait withdraws a queue entry after the caller stopped waiting. It
// runs detached from the caller's context, which may already be over.
func (s *Server) cancelWait(name, leaseID string, waitID uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := connect.NewRequest(&pb.CancelWaitRequest{Name: name, LeaseId: leaseID, WaitId: waitID})
	for {
		// On the leader, or forwarded to it: leadership may have moved
		// while the request waited.
		_, err := onLeader(ctx, s, req, s.cancelWaitLocal, client.CancelWait)
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

func (s *Server) cancelWaitLocal(ctx context.Context, m *pb.CancelWaitRequest) (*pb.CancelWaitResponse, error) {
	cmd := &fsmpb.Command{Op: &fsmpb.Command_CancelWait{CancelWait: &fsmpb.CancelWait{Name: m.GetName(), LeaseId: m.GetLeaseId(), WaitId: m.GetWaitId()}}}
	if _, err := s.apply(ctx, cmd); err != nil {
		return nil, err
	}
	return &pb.CancelWaitResponse{}, nil
}

func (h *lockService) CancelWait(ctx context.Context, req *connect.Request[pb.CancelWaitRequest]) (*connect.Response[pb.CancelWaitResponse], error) {
	err := checkName(req.Msg.GetName())
	if err == nil {
		err = checkLeaseID(req.Msg.GetLeaseId())
	}
	if err != nil {
		return nil, api.ToConnect(err)
	}
	return onLeader(ctx, h.s, req, h.s.cancelWaitLocal, client.CancelWait)
}

func (h *lockService) Release(ctx context.Context, req *connect.Request[pb.ReleaseRequest]) (*connect.Response[pb.ReleaseResponse], error) {
	m := req.Msg
	err := checkName(m.GetName())
	if err == nil {
		err = checkLeaseID(m.GetLeaseId())
	}
	if err == nil {
		err = checkToken(m.GetToken())
	}
	if err != nil {
		return nil, api.ToConnect(err)
	}
	return onLeader(ctx, h.s, req, func(ctx context.Context, m *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
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
	return &pb.Holding{Name: name, LeaseId: h.GetLeaseId(), Token: h.GetToken(), Owner: owner, AcquiredUnixMs: h.GetAcquiredUnixMs(), LockDelayMs: h.GetLockDelayMs()}
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
		if err := s.node.ReadIndex(ctx); err != nil {
			return nil, err
		}
		return local(m)
	}, remote)
}

func (h *lockService) Status(ctx context.Context, req *connect.Request[pb.StatusRequest]) (*connect.Response[pb.StatusResponse], error) {
	if err := checkName(req.Msg.GetName()); err != nil {
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
	out := &pb.LockInfo{Name: info.Name, Holder: holdingPB(info.Name, info.Holder, info.Owner), RemainingMs: -1, Delayed: info.Delayed}
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
	if err := checkPrefix(req.Msg.GetPrefix()); err != nil {
		return nil, api.ToConnect(err)
	}
	if req.Msg.GetLimit() < 0 {
		return nil, api.ToConnect(api.Errorf(api.CodeInvalidArgument, "limit must be ≥ 0"))
	}
	return read(ctx, h.s, req, req.Msg.GetStale(), func(m *pb.ListRequest) (*pb.ListResponse, error) {
		limit := int(m.GetLimit())
		if limit == 0 || limit > MaxListLimit {
			limit = MaxListLimit
		}
		var (
			infos     []fsm.LockInfo
			truncated bool
		)
		owners := map[string]string{}
		h.s.node.Read(func(fm *fsm.Machine) {
			infos, truncated = fm.List(m.GetPrefix(), limit)
			for _, info := range infos {
				for _, w := range info.Waiters {
					owners[w.LeaseId] = fm.Owner(w.LeaseId)
				}
			}
		})
		out := &pb.ListResponse{Truncated: truncated}
		for _, info := range infos {
			out.Locks = append(out.Locks, h.s.lockInfoPB(info, owners))
		}
		return out, nil
	}, client.List)
}

// Watch streams the events this node applies; every node applies every
// entry, so any node can serve it.
func (h *lockService) Watch(ctx context.Context, req *connect.Request[pb.WatchRequest], stream *connect.ServerStream[pb.WatchResponse]) error {
	if err := checkPrefix(req.Msg.GetPrefix()); err != nil {
		return api.ToConnect(err)
	}
	w := h.s.hub.watch(req.Msg.GetPrefix())
	defer h.s.hub.unwatch(w)
	// Send headers now so the caller knows the watch is registered.
	if err := stream.Conn().Send(nil); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-h.s.drain:
			return api.ToConnect(api.Errorf(api.CodeUnavailable, "server shutting down"))
		case <-w.lagged:
			return api.ToConnect(api.Errorf(api.CodeResourceExhausted, "watcher fell more than %d events behind", watchBuffer))
		case ev := <-w.ch:
			if err := stream.Send(&pb.WatchResponse{Event: &pb.Event{Type: ev.Type, Name: ev.Name, LeaseId: ev.LeaseID, Owner: ev.Owner, Token: ev.Token, Index: ev.Index, UnixMs: ev.UnixMs}}); err != nil {
				return err
			}
		}
	}
}

func (h *lockService) KVPut(ctx context.Context, req *connect.Request[pb.KVPutRequest]) (*connect.Response[pb.KVPutResponse], error) {
	m := req.Msg
	err := checkKey(m.GetKey())
	if err == nil {
		err = checkToken(m.GetToken())
	}
	if err == nil && len(m.GetValue()) > MaxValueLen {
		err = api.Errorf(api.CodeInvalidArgument, "value is %d bytes; the limit is %d", len(m.GetValue()), MaxValueLen)
	}
	if err != nil {
		return nil, api.ToConnect(err)
	}
	return onLeader(ctx, h.s, req, func(ctx context.Context, m *pb.KVPutRequest) (*pb.KVPutResponse, error) {
		_, err := h.s.apply(ctx, &fsmpb.Command{Op: &fsmpb.Command_KvPut{KvPut: &fsmpb.KVPut{Key: m.GetKey(), Value: m.GetValue(), Token: m.GetToken(), Strict: m.GetStrict()}}})
		if err != nil {
			return nil, err
		}
		return &pb.KVPutResponse{Key: m.GetKey(), Token: m.GetToken()}, nil
	}, client.KVPut)
}

func (h *lockService) KVGet(ctx context.Context, req *connect.Request[pb.KVGetRequest]) (*connect.Response[pb.KVGetResponse], error) {
	if err := checkKey(req.Msg.GetKey()); err != nil {
		return nil, api.ToConnect(err)
	}
	return read(ctx, h.s, req, req.Msg.GetStale(), func(m *pb.KVGetRequest) (*pb.KVGetResponse, error) {
		var e *fsmpb.KV
		h.s.node.Read(func(fm *fsm.Machine) { e = fm.KV(m.GetKey()) })
		if e == nil {
			return nil, api.Errorf(api.CodeNotFound, "key %q has no value", m.GetKey())
		}
		return &pb.KVGetResponse{Key: e.GetKey(), Value: e.GetValue(), Token: e.GetToken()}, nil
	}, client.KVGet)
}
