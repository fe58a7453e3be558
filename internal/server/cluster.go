package server

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
	"github.com/leasehold/leasehold/internal/httpedge"
	"github.com/leasehold/leasehold/internal/membership"
	"github.com/leasehold/leasehold/internal/raftnode"
	"github.com/leasehold/leasehold/internal/validate"
)

// clusterIDHeader carries the sender's cluster id on every request a node
// forwards to another (membership.ClusterIDHeader).
const clusterIDHeader = membership.ClusterIDHeader

// clusterService implements leaseholdv1connect.ClusterServiceHandler: it
// validates, forwards to the leader, and leaves membership to s.members.
type clusterService struct{ s *Server }

type addMemberRequest = pb.AddMemberRequest

type clusterClient = leaseholdv1connect.ClusterServiceClient

// openMembership starts s.members on the opened node.
func (s *Server) openMembership() error {
	var err error
	s.members, err = membership.New(membership.Config{
		Node:    s.node,
		APIAddr: s.cfg.APIAddr,
		Logger:  s.cfg.Logger,
		Peer:    s.clusterClient,
		Apply:   s.apply,
	})
	return err
}

// clusterClient is a client of the ClusterService of the node whose API
// is at addr.
func (s *Server) clusterClient(addr string) clusterClient {
	return leaseholdv1connect.NewClusterServiceClient(s.http, s.peerURL(addr), connect.WithGRPC())
}

func (s *Server) selfMember() *pb.Member { return s.members.Self() }

func (c *clusterService) Members(ctx context.Context, req *connect.Request[pb.MembersRequest]) (*connect.Response[pb.MembersResponse], error) {
	leaderID, members, err := c.s.members.Members(ctx, req.Header().Get(membership.LocalHeader) != "")
	if err != nil {
		return nil, api.ToConnect(toAPI(err))
	}
	return connect.NewResponse(&pb.MembersResponse{LeaderId: leaderID, Members: members}), nil
}

// leaderCluster runs f on the leader: locally, or on the leader's
// ClusterService when this node follows.
func leaderCluster[Req, Res any](
	ctx context.Context, s *Server, req *connect.Request[Req],
	local func(context.Context, *Req) (*Res, error),
	remote func(leaseholdv1connect.ClusterServiceClient, context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
) (*connect.Response[Res], error) {
	if s.node.IsLeader() {
		if err := s.edge.DecideAtLeader(ctx, req.Msg); err != nil {
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
	cc := s.clusterClient(addr)
	fwd := connect.NewRequest(req.Msg)
	s.edge.SetForwardHeaders(ctx, fwd.Header())
	res, err := remote(cc, ctx, fwd)
	return res, forwardErr(err)
}

// AddMember adds a non-voter, re-adds a fresh member that lost its data
// as a non-voter, or, when the member exists at that raft address, only
// records its API address (every node calls it at start); see
// membership.Manager.Add.
func (c *clusterService) AddMember(ctx context.Context, req *connect.Request[pb.AddMemberRequest]) (*connect.Response[pb.AddMemberResponse], error) {
	m := req.Msg
	if err := validate.NameLike("member id", m.GetId(), false); err != nil {
		return nil, api.ToConnect(err)
	}
	if m.GetRaftAddr() == "" || m.GetApiAddr() == "" {
		return nil, api.ToConnect(api.Errorf(api.CodeInvalidArgument, "raft_addr and api_addr are required"))
	}
	if err := c.s.members.Growable(); err != nil {
		return nil, api.ToConnect(err)
	}
	return leaderCluster(ctx, c.s, req, func(ctx context.Context, m *pb.AddMemberRequest) (*pb.AddMemberResponse, error) {
		if err := c.s.members.Add(ctx, m.GetId(), m.GetRaftAddr(), m.GetApiAddr(), m.GetFresh()); err != nil {
			return nil, err
		}
		members, err := c.Members(ctx, connect.NewRequest(&pb.MembersRequest{}))
		if err != nil {
			return nil, err
		}
		return &pb.AddMemberResponse{Members: members.Msg.GetMembers(), ClusterId: c.s.node.ClusterID()}, nil
	}, clusterClient.AddMember)
}

// RemoveMember removes a member, unless the voters left would not include
// a quorum of reachable members.
func (c *clusterService) RemoveMember(ctx context.Context, req *connect.Request[pb.RemoveMemberRequest]) (*connect.Response[pb.RemoveMemberResponse], error) {
	if err := validate.NameLike("member id", req.Msg.GetId(), false); err != nil {
		return nil, api.ToConnect(err)
	}
	return leaderCluster(ctx, c.s, req, func(ctx context.Context, m *pb.RemoveMemberRequest) (*pb.RemoveMemberResponse, error) {
		if err := c.s.members.Remove(ctx, m.GetId()); err != nil {
			return nil, err
		}
		members, err := c.Members(ctx, connect.NewRequest(&pb.MembersRequest{}))
		if err != nil {
			return nil, err
		}
		return &pb.RemoveMemberResponse{Members: members.Msg.GetMembers()}, nil
	}, clusterClient.RemoveMember)
}

func (c *clusterService) TransferLeader(ctx context.Context, req *connect.Request[pb.TransferLeaderRequest]) (*connect.Response[pb.TransferLeaderResponse], error) {
	return leaderCluster(ctx, c.s, req, func(ctx context.Context, m *pb.TransferLeaderRequest) (*pb.TransferLeaderResponse, error) {
		id, err := c.s.members.TransferLeader(ctx, m.GetId())
		if err != nil {
			return nil, err
		}
		return &pb.TransferLeaderResponse{LeaderId: id}, nil
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

// join asks the member at cfg.Join to add this node before raft starts,
// and returns the cluster's id (membership.Join).
func join(cfg Config) (string, error) {
	hc := httpedge.WithNodeSecret(httpedge.PeerClient(cfg.PeerClientTLS), cfg.NodeSecret)
	defer hc.CloseIdleConnections()
	id, err := membership.Join(membership.Joining{
		ID: cfg.Raft.NodeID, RaftAddr: cfg.Raft.RaftAddr, APIAddr: cfg.APIAddr,
		Via:     cfg.Join,
		Cluster: leaseholdv1connect.NewClusterServiceClient(hc, httpedge.PeerBaseURL(cfg.PeerClientTLS, cfg.Join), connect.WithGRPC()),
		Logger:  cfg.Logger,
	})
	if err != nil {
		return "", fmt.Errorf("server: %w", err)
	}
	return id, nil
}

// prepareJoin, for a node told to join whose data dir holds no state,
// has it added to the cluster and learns the cluster id before raft
// starts. A node with state restarts as the member it is.
func prepareJoin(cfg *Config) error {
	if cfg.Join == "" {
		return nil
	}
	has, err := raftnode.HasState(cfg.Raft.DataDir)
	if err != nil || has {
		return err
	}
	id, err := join(*cfg)
	if err != nil {
		return err
	}
	cfg.Raft.ClusterID = id
	return nil
}
