package server

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/httpedge"
	"github.com/leasehold/leasehold/internal/raftnode"
)

// clusterIDHeader carries the sender's cluster id on every request a node
// forwards to another; the receiver refuses a request from another cluster.
const clusterIDHeader = "Leasehold-Cluster-Id"

// promoteInterval is how often the leader looks for caught-up non-voters.
const promoteInterval = 500 * time.Millisecond

// joinTimeout bounds how long a new node tries to be added before it
// starts: the member it joins through may be electing a leader.
const joinTimeout = 30 * time.Second

// clusterCheck refuses requests forwarded by a node of another cluster.
type clusterCheck struct{ s *Server }

func (c clusterCheck) check(h interface{ Get(string) string }) error {
	if id := h.Get(clusterIDHeader); id != "" && id != c.s.node.ClusterID() {
		by := h.Get(forwardedHeader)
		c.s.cfg.Logger.Warn("refused a request forwarded from another cluster", "from_node", by, "from_cluster", id, "cluster", c.s.node.ClusterID())
		return api.ToConnect(api.Errorf(api.CodePermissionDenied, "request forwarded by node %q of cluster %s; node %s is in cluster %s", by, id, c.s.node.ID(), c.s.node.ClusterID()))
	}
	return nil
}

func (c clusterCheck) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := c.check(req.Header()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (c clusterCheck) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (c clusterCheck) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := c.check(conn.RequestHeader()); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// join asks the member at cfg.Join to add this node (as a fresh non-voter)
// before raft starts, and returns the cluster's id. It retries while the
// cluster is unavailable, up to joinTimeout.
func join(cfg Config) (string, error) {
	hc := httpedge.WithNodeSecret(httpedge.PeerClient(cfg.PeerClientTLS), cfg.NodeSecret)
	defer hc.CloseIdleConnections()
	cc := leaseholdv1connect.NewClusterServiceClient(hc, httpedge.PeerBaseURL(cfg.PeerClientTLS, cfg.Join), connect.WithGRPC())
	req := &pb.AddMemberRequest{Id: cfg.Raft.NodeID, RaftAddr: cfg.Raft.RaftAddr, ApiAddr: cfg.APIAddr, Fresh: true}
	deadline := time.Now().Add(joinTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := cc.AddMember(ctx, connect.NewRequest(req))
		cancel()
		if err == nil {
			if res.Msg.GetClusterId() == "" {
				return "", fmt.Errorf("server: join through %s: the member sent no cluster id", cfg.Join)
			}
			cfg.Logger.Info("joined the cluster as a non-voter", "via", cfg.Join, "cluster_id", res.Msg.GetClusterId())
			return res.Msg.GetClusterId(), nil
		}
		// Adding a fresh member is idempotent, so an attempt that timed out
		// (a forward to a leader that just died) is tried again.
		code := api.CodeOf(err)
		retry := api.NotSent(err) || code == api.CodeUnavailable || code == api.CodeNotLeader ||
			code == api.CodeOutcomeUnknown || code == api.CodeDeadlineExceeded
		if !retry || time.Now().After(deadline) {
			return "", fmt.Errorf("server: join through %s: %w", cfg.Join, err)
		}
		cfg.Logger.Info("join: cluster not ready, retrying", "via", cfg.Join, "err", err)
		<-time.After(500 * time.Millisecond)
	}
}

// promoteLoop makes caught-up non-voters voters, on the leader, until the
// server stops (Consul's autopilot does the same).
func (s *Server) promoteLoop() {
	t := time.NewTicker(promoteInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if s.node.IsLeader() {
			s.promoteCaughtUp()
		}
	}
}

// promoteCaughtUp promotes every non-voter that the leader reaches and
// that has applied every entry committed before it was asked.
func (s *Server) promoteCaughtUp() {
	members, err := s.node.Members()
	if err != nil {
		return
	}
	for _, m := range members {
		if m.Voter || !s.node.Reachable(m.ID) {
			continue
		}
		commit := s.node.Raft().CommitIndex()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		applied, ok := s.appliedIndexOf(ctx, m.ID)
		if ok && applied >= commit {
			if err := s.node.Promote(ctx, m.ID); err != nil {
				s.cfg.Logger.Warn("promote member", "id", m.ID, "err", err)
			} else {
				s.cfg.Logger.Info("member caught up and promoted to voter", "id", m.ID, "applied", applied)
			}
		}
		cancel()
	}
}

// appliedIndexOf asks member id's API for its applied index.
func (s *Server) appliedIndexOf(ctx context.Context, id string) (uint64, bool) {
	var addr string
	s.node.Read(func(fm *fsm.Machine) { addr = fm.NodeAPIAddr(id) })
	if addr == "" {
		return 0, false
	}
	cc := leaseholdv1connect.NewClusterServiceClient(s.http, s.peerURL(addr), connect.WithGRPC())
	req := connect.NewRequest(&pb.MembersRequest{})
	req.Header().Set(localHeader, "1")
	req.Header().Set(clusterIDHeader, s.node.ClusterID())
	res, err := cc.Members(ctx, req)
	if err != nil || len(res.Msg.GetMembers()) != 1 || res.Msg.GetMembers()[0].GetId() != id {
		return 0, false
	}
	return res.Msg.GetMembers()[0].GetAppliedIndex(), true
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
