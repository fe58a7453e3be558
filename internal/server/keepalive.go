package server

import (
	"context"
	"errors"
	"io"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/authedge"
	"github.com/leasehold/leasehold/internal/lessor"
	"github.com/leasehold/leasehold/internal/lockstream"
	"github.com/leasehold/leasehold/internal/validate"
)

const (
	// MaxKeepAliveBatch bounds the lease ids of one KeepAlive or
	// KeepAliveStream message.
	MaxKeepAliveBatch = 10_000
	// keepAliveForwardTimeout bounds one renewal a follower forwards to the
	// leader. A renewal is harmless to repeat, so a leader that does not
	// answer in time (paused, partitioned) gets `unavailable` and the
	// client tries another node instead of waiting out its lease.
	keepAliveForwardTimeout = time.Second
	// renewTimeout bounds a renewal on the leader: the confirmation of its
	// leadership and the log write that clears a checkpoint before a
	// checkpointed session is renewed (see package lessor).
	renewTimeout = 2 * time.Second
)

// KeepAlive renews one session (lease_id) or a batch (lease_ids) from the
// leader's memory, once its leadership is confirmed for the request (see
// lessor.RenewMany); a follower forwards it with a short deadline. The
// leader charges the caller's renew-rate one unit per lease id, and
// refuses the whole request with resource-exhausted when it is spent
// (admission/meter.go).
func (h *lockService) KeepAlive(ctx context.Context, req *connect.Request[pb.KeepAliveRequest]) (*connect.Response[pb.KeepAliveResponse], error) {
	m := req.Msg
	if err := checkKeepAlive(m.GetLeaseId(), m.GetLeaseIds()); err != nil {
		return nil, api.ToConnect(err)
	}
	return onLeader(ctx, h.s, req, func(ctx context.Context, m *pb.KeepAliveRequest) (*pb.KeepAliveResponse, error) {
		// Metered where the ids are walked: on the leader, as the
		// principal the follower forwarded for (admission/meter.go).
		if err := h.s.lim.Renew(ctx, max(len(m.GetLeaseIds()), 1)); err != nil {
			return nil, err
		}
		if id := m.GetLeaseId(); id != "" {
			ctx, cancel := context.WithTimeout(ctx, renewTimeout)
			defer cancel()
			var out [1]lessor.Renewal
			h.s.lessor.RenewMany(ctx, []string{id}, out[:])
			if out[0].Err != nil {
				return nil, out[0].Err
			}
			return &pb.KeepAliveResponse{LeaseId: id, TtlMs: out[0].TTL.Milliseconds()}, nil
		}
		results, err := h.s.renewLocal(ctx, m.GetLeaseIds())
		if err != nil {
			return nil, err
		}
		return &pb.KeepAliveResponse{Results: results}, nil
	}, forwardKeepAlive)
}

// forwardKeepAlive sends a renewal to the leader with a deadline of at most
// keepAliveForwardTimeout. No answer in time is `unavailable`: the renewal
// was not acknowledged, and sending it again is harmless.
func forwardKeepAlive(c client, ctx context.Context, req *connect.Request[pb.KeepAliveRequest]) (*connect.Response[pb.KeepAliveResponse], error) {
	actx, cancel := context.WithTimeout(ctx, keepAliveForwardTimeout)
	defer cancel()
	res, err := c.KeepAlive(actx, req)
	if err != nil && !api.IsServerError(err) && ctx.Err() == nil {
		return nil, api.ToConnect(api.Errorf(api.CodeUnavailable, "the leader did not answer a renewal within %v: %v", keepAliveForwardTimeout, err))
	}
	return res, err
}

func checkKeepAlive(id string, ids []string) error {
	switch {
	case id != "" && len(ids) > 0:
		return api.Errorf(api.CodeInvalidArgument, "set lease_id or lease_ids, not both")
	case len(ids) > MaxKeepAliveBatch:
		return api.Errorf(api.CodeInvalidArgument, "at most %d lease ids per renewal, got %d", MaxKeepAliveBatch, len(ids))
	case len(ids) == 0:
		return validate.LeaseID(id)
	}
	return nil
}

// renewLocal renews ids on this node's lessor (RenewLeases).
func (s *Server) renewLocal(ctx context.Context, ids []string) ([]*pb.KeepAliveResult, error) {
	return RenewLeases(ctx, s.lessor, ids)
}

// renewBatch renews ids on the leader, locally or by forwarding, and
// answers every id: a failure to reach the leader becomes every id's code.
func (h *lockService) renewBatch(ctx context.Context, ids []string) []*pb.KeepAliveResult {
	res, err := h.KeepAlive(ctx, connect.NewRequest(&pb.KeepAliveRequest{LeaseIds: ids}))
	if err == nil && len(res.Msg.GetResults()) == len(ids) {
		return res.Msg.GetResults()
	}
	code := api.CodeOf(err)
	if err == nil {
		code = api.CodeInternal // a leader that answered the wrong number of results
	}
	results := make([]*pb.KeepAliveResult, len(ids))
	for i, id := range ids {
		results[i] = &pb.KeepAliveResult{LeaseId: id, ErrorCode: string(code)}
	}
	return results
}

// KeepAliveStream renews on this node when it leads, and otherwise forwards
// each message to the leader as one (batched) KeepAlive and names the
// leader in its answer (leader_api_addr). One response per
// request, in order: a request with lease_id gets lease_id, ttl_ms and
// error_code; one with lease_ids gets results. A message refused by
// renew-rate is answered with error_code resource-exhausted for each of
// its ids, and the stream goes on. It ends when the caller
// closes its side, or at once when the server shuts down.
func (h *lockService) KeepAliveStream(ctx context.Context, stream *connect.BidiStream[pb.KeepAliveStreamRequest, pb.KeepAliveStreamResponse]) error {
	release, err := h.s.lim.KeepAliveStream(ctx)
	if err != nil {
		return err
	}
	defer release()
	// A revoked token or a changed policy ends the stream at once, not at
	// the next renewal: its renewals are decided as the principal it had.
	ctx, stop := h.s.edge.Revocable(ctx, leaseholdv1connect.LeaseholdServiceKeepAliveStreamProcedure, nil)
	defer stop()
	in := lockstream.ReceiveAll(ctx, stream.Receive)
	for {
		var r lockstream.Received[pb.KeepAliveStreamRequest]
		select {
		case <-h.s.drain:
			return api.ToConnect(api.Errorf(api.CodeUnavailable, "server shutting down"))
		case <-ctx.Done():
			return authedge.Revoked(ctx)
		case r = <-in:
		}
		if errors.Is(r.Err, io.EOF) {
			return nil
		}
		if r.Err != nil {
			return r.Err
		}
		resp := &pb.KeepAliveStreamResponse{}
		id, ids := r.Msg.GetLeaseId(), r.Msg.GetLeaseIds()
		switch err := checkKeepAlive(id, ids); {
		case err != nil:
			resp.LeaseId, resp.ErrorCode = id, string(api.CodeOf(err))
		case len(ids) > 0:
			resp.Results = h.renewBatch(ctx, ids)
		default:
			one := h.renewBatch(ctx, []string{id})[0]
			resp.LeaseId, resp.TtlMs, resp.ErrorCode = id, one.GetTtlMs(), one.GetErrorCode()
		}
		resp.LeaderApiAddr = h.s.leaderHint()
		h.s.met.CountKeepaliveMessage()
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}
