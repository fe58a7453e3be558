package server

import (
	"context"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/authedge"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
	"github.com/leasehold/leasehold/internal/validate"
)

// CreateSession starts a session on the leader; the per-principal session
// limit is reserved before the proposal and given back if it fails.
func (h *lockService) CreateSession(ctx context.Context, req *connect.Request[pb.CreateSessionRequest]) (*connect.Response[pb.CreateSessionResponse], error) {
	ttl, err := validate.TTL(req.Msg.GetTtlMs())
	if err == nil {
		err = validate.Owner(req.Msg.GetOwner())
	}
	if err == nil {
		err = h.s.checkSequencers(req.Msg.GetSequencers())
	}
	if err != nil {
		return nil, api.ToConnect(err)
	}
	return onLeader(ctx, h.s, req, func(ctx context.Context, m *pb.CreateSessionRequest) (*pb.CreateSessionResponse, error) {
		id := newLeaseID()
		created, err := h.s.lim.ReserveSession(ctx, id, h.s.endedSessions)
		if err != nil {
			return nil, err
		}
		_, err = h.s.apply(ctx, &fsmpb.Command{Op: &fsmpb.Command_CreateSession{CreateSession: &fsmpb.CreateSession{LeaseId: id, TtlMs: ttl.Milliseconds(), Owner: m.GetOwner(), Sequencers: m.GetSequencers(), Principal: authedge.Principal(ctx).Name}}})
		created(err != nil)
		if err != nil {
			return nil, err
		}
		_, _ = h.s.lessor.RenewCommitted(id) // the TTL counts from this answer
		return &pb.CreateSessionResponse{LeaseId: id, TtlMs: ttl.Milliseconds(), Owner: m.GetOwner()}, nil
	}, client.CreateSession)
}

// CloseSession ends a session and releases its holdings and waits.
func (h *lockService) CloseSession(ctx context.Context, req *connect.Request[pb.CloseSessionRequest]) (*connect.Response[pb.CloseSessionResponse], error) {
	if err := validate.LeaseID(req.Msg.GetLeaseId()); err != nil {
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
