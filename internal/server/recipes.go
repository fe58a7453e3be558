package server

import (
	"context"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
	"github.com/leasehold/leasehold/internal/validate"
)

// MaxHoldingValueLen bounds the value a holding carries (an election
// candidate's proclamation), in bytes.
const MaxHoldingValueLen = 4 << 10

// MaxListSessions is the most sessions one ListSessions returns.
const MaxListSessions = 1000

// checkMode validates the mode, permits and value of an acquire request.
// Whether the permits match the name's is the state machine's to say.
func checkMode(mode pb.LockMode, permits uint32, value []byte) error {
	switch {
	case mode != pb.LockMode_LOCK_MODE_EXCLUSIVE && mode != pb.LockMode_LOCK_MODE_SHARED:
		return api.Errorf(api.CodeInvalidArgument, "unknown lock mode %d", mode)
	case permits > fsm.MaxPermits:
		return api.Errorf(api.CodeInvalidArgument, "permits is %d; the limit is %d", permits, fsm.MaxPermits)
	case mode == pb.LockMode_LOCK_MODE_SHARED && permits > 1:
		return api.Errorf(api.CodeInvalidArgument, "a shared (read) lock has one permit, not %d", permits)
	case len(value) > MaxHoldingValueLen:
		return api.Errorf(api.CodeInvalidArgument, "value is %d bytes; the limit is %d", len(value), MaxHoldingValueLen)
	}
	return nil
}

func (h *lockService) Proclaim(ctx context.Context, req *connect.Request[pb.ProclaimRequest]) (*connect.Response[pb.ProclaimResponse], error) {
	m := req.Msg
	err := validate.Holding(m.GetName(), m.GetLeaseId(), m.GetToken())
	if err == nil {
		err = checkMode(pb.LockMode_LOCK_MODE_EXCLUSIVE, 0, m.GetValue())
	}
	if err != nil {
		return nil, api.ToConnect(err)
	}
	return onLeader(ctx, h.s, req, func(ctx context.Context, m *pb.ProclaimRequest) (*pb.ProclaimResponse, error) {
		res, err := h.s.apply(ctx, &fsmpb.Command{Op: &fsmpb.Command_Proclaim{Proclaim: &fsmpb.Proclaim{Name: m.GetName(), LeaseId: m.GetLeaseId(), Token: m.GetToken(), Value: m.GetValue()}}})
		if err != nil {
			return nil, err
		}
		return &pb.ProclaimResponse{Holding: holdingPB(m.GetName(), res.Holding, res.Session.GetOwner())}, nil
	}, client.Proclaim)
}

func (h *lockService) ListSessions(ctx context.Context, req *connect.Request[pb.ListSessionsRequest]) (*connect.Response[pb.ListSessionsResponse], error) {
	if req.Msg.GetLimit() < 0 {
		return nil, api.ToConnect(api.Errorf(api.CodeInvalidArgument, "limit must be ≥ 0"))
	}
	return read(ctx, h.s, req, req.Msg.GetStale(), func(m *pb.ListSessionsRequest) (*pb.ListSessionsResponse, error) {
		limit := int(m.GetLimit())
		if limit == 0 || limit > MaxListSessions {
			limit = MaxListSessions
		}
		used, err := h.s.lim.ListCharge(ctx) // admission/meter.go
		if err != nil {
			return nil, err
		}
		out := &pb.ListSessionsResponse{}
		h.s.node.Read(func(fm *fsm.Machine) {
			var page []*fsmpb.Session
			page, out.Truncated = fm.SessionPage(limit)
			for _, s := range page {
				out.Sessions = append(out.Sessions, &pb.SessionInfo{LeaseId: s.GetLeaseId(), Owner: s.GetOwner(), TtlMs: s.GetTtlMs(),
					CreatedUnixMs: s.GetCreatedUnixMs(), RemainingMs: -1, Names: fm.SessionNames(s.GetLeaseId())})
			}
		})
		for _, s := range out.Sessions {
			if d, ok := h.s.lessor.Remaining(s.LeaseId); ok {
				s.RemainingMs = d.Milliseconds()
			}
		}
		used(len(out.Sessions))
		return out, nil
	}, client.ListSessions)
}
