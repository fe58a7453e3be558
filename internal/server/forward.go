package server

// Forwarding: a follower sends what only the leader may do to the
// leader, once, and names the leader in its answers.

import (
	"context"
	"errors"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/admission"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/httpedge"
	"github.com/leasehold/leasehold/internal/lessor"
	"github.com/leasehold/leasehold/internal/raftnode"
)

// leaderAPIAddr is the API address the leader registered, or an error
// when no leader is known or it registered none.
func (s *Server) leaderAPIAddr() (string, error) {
	id, _ := s.node.Leader()
	if id == "" {
		return "", api.Errorf(api.CodeUnavailable, "no leader is known to node %s", s.node.ID())
	}
	var addr string
	s.node.Read(func(m *fsm.Machine) { addr = m.NodeAPIAddr(id) })
	if addr == "" {
		return "", api.Errorf(api.CodeUnavailable, "the leader %s has not registered its API address yet", id)
	}
	if id == s.node.ID() {
		return "", &api.Error{Code: api.CodeNotLeader, Message: "leadership is changing", LeaderAddr: addr}
	}
	return addr, nil
}

// forwardAddr is the API address of the leader a follower forwards to.
func (s *Server) forwardAddr() (string, error) {
	addr, err := s.leaderAPIAddr()
	if err != nil {
		return "", err
	}
	// A follower that has not heard from the leader for longer than the
	// heartbeat timeout (an election is about to start) does not forward:
	// the leader is paused, partitioned or gone, and a request sent there
	// would wait out the caller's deadline. Nothing was sent, so the answer
	// is `unavailable` at once and the client tries another node.
	if since := time.Since(s.node.Raft().LastContact()); since > s.cfg.Raft.HeartbeatTimeout {
		return "", api.Errorf(api.CodeUnavailable, "node %s has not heard from the leader for %v", s.node.ID(), since.Round(time.Millisecond))
	}
	return addr, nil
}

func (s *Server) leaderClient() (leaseholdv1connect.LeaseholdServiceClient, error) {
	addr, err := s.forwardAddr()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[addr]
	if !ok {
		c = leaseholdv1connect.NewLeaseholdServiceClient(s.http, s.peerURL(addr), connect.WithGRPC(), connect.WithReadMaxBytes(MaxRequestSize*2))
		s.clients[addr] = c
	}
	return c, nil
}

// forwardedHeader marks a request a follower forwarded; the receiver does
// not forward it again, so a request never loops between nodes.
const forwardedHeader = httpedge.ForwardedHeader

// peerURL returns the base URL of another node's API at addr (host:port).
func (s *Server) peerURL(addr string) string { return httpedge.PeerBaseURL(s.cfg.PeerClientTLS, addr) }

func isNotLeader(err error) bool {
	return errors.Is(err, raftnode.ErrNotLeader) || errors.Is(err, lessor.ErrNotLeader)
}

// onLeader runs local on the leader; on a follower (or when leadership is
// lost before the command was proposed) it forwards the request to the
// leader with remote. Errors are mapped to API codes.
func onLeader[Req, Res any](
	ctx context.Context, s *Server, req *connect.Request[Req],
	local func(context.Context, *Req) (*Res, error),
	remote func(leaseholdv1connect.LeaseholdServiceClient, context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
) (*connect.Response[Res], error) {
	return onLeaderVia(ctx, s, req, local, remote, s.leaderClient, toAPI)
}

// onLeaderVia is onLeader for any service: leader gives the client of the
// leader's service, mapErr turns local errors into API errors.
func onLeaderVia[C, Req, Res any](
	ctx context.Context, s *Server, req *connect.Request[Req],
	local func(context.Context, *Req) (*Res, error),
	remote func(C, context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
	leader func() (C, error), mapErr func(error) error,
) (*connect.Response[Res], error) {
	if s.node.IsLeader() {
		if err := s.edge.DecideAtLeader(ctx, req.Msg); err != nil {
			return nil, err
		}
		res, err := local(ctx, req.Msg)
		if err == nil {
			return connect.NewResponse(res), nil
		}
		if !isNotLeader(err) {
			return nil, api.ToConnect(mapErr(err))
		}
	}
	if by := req.Header().Get(forwardedHeader); by != "" {
		return nil, api.ToConnect(api.Errorf(api.CodeNotLeader, "node %s is not the leader (request forwarded by %s)", s.node.ID(), by))
	}
	c, err := leader()
	if err != nil {
		return nil, api.ToConnect(err)
	}
	fwd := connect.NewRequest(req.Msg)
	s.edge.SetForwardHeaders(ctx, fwd.Header())
	s.met.CountForward()
	admission.Yield(ctx) // the leader's answer is a wait, not work (admission/shares.go)
	res, err := remote(c, ctx, fwd)
	if err != nil {
		return nil, forwardErr(err)
	}
	s.tellLeader(res.Header())
	return res, nil
}

// tellLeader names the leader in the response header h of a request this
// follower serves (api.LeaderHeader).
func (s *Server) tellLeader(h http.Header) {
	if addr := s.leaderHint(); addr != "" {
		h.Set(api.LeaderHeader, addr)
	}
}

// leaderHint is the leader's API address when this node does not lead and
// knows it, else "": what a follower names in its answers so that clients
// come to the leader.
func (s *Server) leaderHint() string {
	if s.node.IsLeader() {
		return ""
	}
	addr, _ := s.leaderAPIAddr()
	return addr
}

// forwardErr passes on the leader's answer, and classifies a failure to
// get one: a request that never reached the leader was not applied
// (unavailable); one lost after it was sent may have been (outcome-unknown).
func forwardErr(err error) error {
	if err == nil || api.IsServerError(err) {
		return err
	}
	if api.NotSent(err) {
		return api.ToConnect(api.Errorf(api.CodeUnavailable, "forwarding to the leader: %v", err))
	}
	return api.ToConnect(api.Errorf(api.CodeOutcomeUnknown, "forwarding to the leader: %v", err))
}
