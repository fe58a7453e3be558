package server

import (
	"context"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
	"github.com/leasehold/leasehold/internal/validate"
)

// clusterService implements leaseholdv1connect.ClusterServiceHandler.
type clusterService struct{ s *Server }

type addMemberRequest = pb.AddMemberRequest

// localHeader asks Members for this node's own view only (no fan-out).
const localHeader = "Leasehold-Local"

func (c *clusterService) Members(ctx context.Context, req *connect.Request[pb.MembersRequest]) (*connect.Response[pb.MembersResponse], error) {
	s := c.s
	r := s.node.Raft()
	leaderID, _ := s.node.Leader()
	if req.Header().Get(localHeader) != "" {
		return connect.NewResponse(&pb.MembersResponse{LeaderId: leaderID, Members: []*pb.Member{s.selfMember()}}), nil
	}
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, api.ToConnect(toAPI(err))
	}
	servers := f.Configuration().Servers
	out := make([]*pb.Member, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		m := &pb.Member{Id: string(srv.ID), RaftAddr: string(srv.Address), Suffrage: srv.Suffrage.String(), Role: "unreachable"}
		s.node.Read(func(fm *fsm.Machine) { m.ApiAddr = fm.NodeAPIAddr(m.Id) })
		out[i] = m
		if m.Id == s.node.ID() {
			out[i] = s.selfMember()
			out[i].Suffrage = m.Suffrage
			continue
		}
		if m.ApiAddr == "" {
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			cc := leaseholdv1connect.NewClusterServiceClient(s.http, s.peerURL(m.ApiAddr), connect.WithGRPC())
			lr := connect.NewRequest(&pb.MembersRequest{})
			lr.Header().Set(localHeader, "1")
			lr.Header().Set(clusterIDHeader, s.node.ClusterID())
			resp, err := cc.Members(ctx, lr)
			if err != nil || len(resp.Msg.GetMembers()) != 1 {
				return
			}
			got := resp.Msg.GetMembers()[0]
			m.Role, m.Term, m.CommitIndex, m.AppliedIndex = got.GetRole(), got.GetTerm(), got.GetCommitIndex(), got.GetAppliedIndex()
		})
	}
	wg.Wait()
	return connect.NewResponse(&pb.MembersResponse{LeaderId: leaderID, Members: out}), nil
}

func (s *Server) selfMember() *pb.Member {
	r := s.node.Raft()
	role := "follower"
	switch r.State() {
	case raft.Leader:
		role = "leader"
	case raft.Candidate:
		role = "candidate"
	case raft.Shutdown:
		role = "shutdown"
	}
	term, _ := strconv.ParseUint(r.Stats()["term"], 10, 64)
	return &pb.Member{
		Id: s.node.ID(), RaftAddr: s.node.RaftAddr(), ApiAddr: s.cfg.APIAddr, Role: role,
		Term: term, CommitIndex: r.CommitIndex(), AppliedIndex: r.AppliedIndex(),
	}
}

// leaderCluster runs f on the leader: locally, or on the leader's
// ClusterService when this node follows.
func leaderCluster[Req, Res any](
	ctx context.Context, s *Server, req *connect.Request[Req],
	local func(context.Context, *Req) (*Res, error),
	remote func(leaseholdv1connect.ClusterServiceClient, context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
) (*connect.Response[Res], error) {
	if s.node.IsLeader() {
		if err := s.checkPending(ctx, req.Msg); err != nil {
			return nil, err
		}
		res, err := local(ctx, req.Msg)
		if err != nil {
			return nil, api.ToConnect(toAPI(err))
		}
		return connect.NewResponse(res), nil
	}
	if by := req.Header().Get(forwardedHeader); by != "" {
		return nil, api.ToConnect(api.Errorf(api.CodeNotLeader, "node %s is not the leader (forwarded by %s)", s.node.ID(), by))
	}
	addr, err := s.leaderAPIAddr()
	if err != nil {
		return nil, api.ToConnect(err)
	}
	cc := leaseholdv1connect.NewClusterServiceClient(s.http, s.peerURL(addr), connect.WithGRPC())
	fwd := connect.NewRequest(req.Msg)
	s.setForwardHeaders(ctx, fwd.Header())
	res, err := remote(cc, ctx, fwd)
	return res, forwardErr(err)
}

type clusterClient = leaseholdv1connect.ClusterServiceClient

// AddMember adds a non-voter (promoted once caught up, see promoteLoop),
// re-adds a fresh member that lost its data as a non-voter, or, when the
// member exists at that raft address, only records its API address (every
// node calls it at start).
func (c *clusterService) AddMember(ctx context.Context, req *connect.Request[pb.AddMemberRequest]) (*connect.Response[pb.AddMemberResponse], error) {
	m := req.Msg
	if err := validate.NameLike("member id", m.GetId(), false); err != nil {
		return nil, api.ToConnect(err)
	}
	if m.GetRaftAddr() == "" || m.GetApiAddr() == "" {
		return nil, api.ToConnect(api.Errorf(api.CodeInvalidArgument, "raft_addr and api_addr are required"))
	}
	if c.s.node.Standalone() {
		return nil, api.ToConnect(api.Errorf(api.CodeInvalidArgument, "node %s runs without a Raft address: to grow it, stop it and start it again on the same --data and --node-id with --raft-addr HOST:PORT, then add members with --join", c.s.node.ID()))
	}
	return leaderCluster(ctx, c.s, req, func(ctx context.Context, m *pb.AddMemberRequest) (*pb.AddMemberResponse, error) {
		s := c.s
		changed, err := s.node.AddMember(ctx, m.GetId(), m.GetRaftAddr(), m.GetFresh())
		if err != nil {
			return nil, err
		}
		if changed {
			s.cfg.Logger.Info("member added as a non-voter", "id", m.GetId(), "raft_addr", m.GetRaftAddr(), "fresh", m.GetFresh())
		}
		if _, err := s.apply(ctx, &fsmpb.Command{Op: &fsmpb.Command_RegisterNode{RegisterNode: &fsmpb.RegisterNode{Id: m.GetId(), ApiAddr: m.GetApiAddr()}}}); err != nil {
			return nil, err
		}
		members, err := c.Members(ctx, connect.NewRequest(&pb.MembersRequest{}))
		if err != nil {
			return nil, err
		}
		return &pb.AddMemberResponse{Members: members.Msg.GetMembers(), ClusterId: s.node.ClusterID()}, nil
	}, clusterClient.AddMember)
}

// RemoveMember removes a member, unless the voters left would not include
// a quorum of reachable members.
func (c *clusterService) RemoveMember(ctx context.Context, req *connect.Request[pb.RemoveMemberRequest]) (*connect.Response[pb.RemoveMemberResponse], error) {
	if err := validate.NameLike("member id", req.Msg.GetId(), false); err != nil {
		return nil, api.ToConnect(err)
	}
	return leaderCluster(ctx, c.s, req, func(ctx context.Context, m *pb.RemoveMemberRequest) (*pb.RemoveMemberResponse, error) {
		if err := c.s.node.RemoveMember(ctx, m.GetId()); err != nil {
			return nil, err
		}
		c.s.cfg.Logger.Info("member removed", "id", m.GetId())
		members, err := c.Members(ctx, connect.NewRequest(&pb.MembersRequest{}))
		if err != nil {
			return nil, err
		}
		return &pb.RemoveMemberResponse{Members: members.Msg.GetMembers()}, nil
	}, clusterClient.RemoveMember)
}

func (c *clusterService) TransferLeader(ctx context.Context, req *connect.Request[pb.TransferLeaderRequest]) (*connect.Response[pb.TransferLeaderResponse], error) {
	return leaderCluster(ctx, c.s, req, func(ctx context.Context, m *pb.TransferLeaderRequest) (*pb.TransferLeaderResponse, error) {
		r := c.s.node.Raft()
		if m.GetId() == c.s.node.ID() {
			// Already there: leadership may have moved on its own between
			// the caller's look at the cluster and this request.
			return &pb.TransferLeaderResponse{LeaderId: c.s.node.ID()}, nil
		}
		var f raft.Future
		if m.GetId() == "" {
			f = r.LeadershipTransfer()
		} else {
			cf := r.GetConfiguration()
			if err := cf.Error(); err != nil {
				return nil, err
			}
			var target *raft.Server
			for _, srv := range cf.Configuration().Servers {
				if string(srv.ID) == m.GetId() {
					target = &srv
				}
			}
			if target == nil {
				return nil, api.Errorf(api.CodeInvalidArgument, "no member %q", m.GetId())
			}
			f = r.LeadershipTransferToServer(target.ID, target.Address)
		}
		if err := f.Error(); err != nil {
			return nil, api.Errorf(api.CodeUnavailable, "leadership transfer: %v", err)
		}
		// The transfer is done once another node leads; wait until this
		// node has heard from it, so the answer names the new leader.
		for {
			if id, _ := c.s.node.Leader(); id != "" && id != c.s.node.ID() {
				return &pb.TransferLeaderResponse{LeaderId: id}, nil
			}
			select {
			case <-ctx.Done():
				return nil, api.Errorf(api.CodeDeadlineExceeded, "leadership transferred, new leader not heard from yet")
			case <-time.After(10 * time.Millisecond):
			}
		}
	}, clusterClient.TransferLeader)
}

// BumpToken raises the token counter (after a restore from backup).
func (c *clusterService) BumpToken(ctx context.Context, req *connect.Request[pb.BumpTokenRequest]) (*connect.Response[pb.BumpTokenResponse], error) {
	if req.Msg.GetMinToken() == 0 {
		return nil, api.ToConnect(api.Errorf(api.CodeInvalidArgument, "min_token must be > 0"))
	}
	return leaderCluster(ctx, c.s, req, func(ctx context.Context, m *pb.BumpTokenRequest) (*pb.BumpTokenResponse, error) {
		if _, err := c.s.apply(ctx, &fsmpb.Command{Op: &fsmpb.Command_BumpToken{BumpToken: &fsmpb.BumpToken{Min: m.GetMinToken()}}}); err != nil {
			return nil, err
		}
		var tok uint64
		c.s.node.Read(func(fm *fsm.Machine) { tok = fm.Token() })
		c.s.cfg.Logger.Info("token counter bumped", "min", m.GetMinToken(), "token", tok)
		return &pb.BumpTokenResponse{Token: tok}, nil
	}, clusterClient.BumpToken)
}
