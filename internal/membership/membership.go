// Package membership is who is in a leasehold cluster and who leads it:
// the cluster id check on requests other nodes forward, a new node's join
// through a running member, the leader's loop that promotes caught-up
// non-voters, the member list with each member's own view (fanned out to
// every member), and the changes an operator asks for (add, remove,
// transfer leadership).
//
// It reaches raft through internal/raftnode and the API server that mounts
// it through its Config: the server decodes and validates a ClusterService
// request, forwards it to the leader when this node follows, and on the
// leader calls a Manager; the Manager proposes through Config.Apply and
// calls other members through Config.Peer.
//
//	ClusterService handler (internal/server) ──► Manager ──► raftnode.Node ──► raft
//	                                               │
//	                                               └──► Config.Peer: other members' ClusterService
package membership

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/raft"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
	"github.com/leasehold/leasehold/internal/raftnode"
)

// ClusterIDHeader carries the sender's cluster id on every request a node
// forwards to another; the receiver refuses a request from another cluster.
const ClusterIDHeader = "Leasehold-Cluster-Id"

// LocalHeader asks Members for the receiving node's own view only (no
// fan-out).
const LocalHeader = "Leasehold-Local"

// Config configures a Manager. Every field is required.
type Config struct {
	// Node is this node's raft node.
	Node *raftnode.Node
	// APIAddr is this node's API address, as it registers it.
	APIAddr string
	// Logger receives the membership changes.
	Logger *slog.Logger
	// Peer returns a client of the ClusterService of the node whose API is
	// at addr. It is called from several goroutines at once.
	Peer func(addr string) leaseholdv1connect.ClusterServiceClient
	// Apply proposes cmd through the log, as the server proposes every
	// command (stamped with its clock), and returns the state machine's
	// refusal as the error. It blocks until the command applied or ctx ends.
	Apply func(ctx context.Context, cmd *fsmpb.Command) (fsm.Result, error)
}

// Validate reports a missing field.
func (c Config) Validate() error {
	switch {
	case c.Node == nil:
		return errors.New("membership: Config.Node is nil")
	case c.APIAddr == "":
		return errors.New("membership: Config.APIAddr is empty")
	case c.Logger == nil:
		return errors.New("membership: Config.Logger is nil")
	case c.Peer == nil:
		return errors.New("membership: Config.Peer is nil")
	case c.Apply == nil:
		return errors.New("membership: Config.Apply is nil")
	}
	return nil
}

// Manager runs the membership of one node. Its methods are safe for
// concurrent use; it holds no lock of its own.
type Manager struct {
	cfg  Config
	node *raftnode.Node
}

// New returns the Manager of cfg.Node.
func New(cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Manager{cfg: cfg, node: cfg.Node}, nil
}

// Self is this node's own view: its role, term, commit and applied index.
func (m *Manager) Self() *pb.Member {
	r := m.node.Raft()
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
		Id: m.node.ID(), RaftAddr: m.node.RaftAddr(), ApiAddr: m.cfg.APIAddr, Role: role,
		Term: term, CommitIndex: r.CommitIndex(), AppliedIndex: r.AppliedIndex(),
	}
}

// Members returns the leader this node knows and the members of the raft
// configuration, each with its own view, asked of it within a second
// ("unreachable" when it does not answer). With local, the members are
// this node alone. The error is raft's, when it cannot read its
// configuration.
func (m *Manager) Members(ctx context.Context, local bool) (leaderID string, members []*pb.Member, err error) {
	r := m.node.Raft()
	leaderID, _ = m.node.Leader()
	if local {
		return leaderID, []*pb.Member{m.Self()}, nil
	}
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return "", nil, err
	}
	servers := f.Configuration().Servers
	out := make([]*pb.Member, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		mb := &pb.Member{Id: string(srv.ID), RaftAddr: string(srv.Address), Suffrage: srv.Suffrage.String(), Role: "unreachable"}
		m.node.Read(func(fm *fsm.Machine) { mb.ApiAddr = fm.NodeAPIAddr(mb.Id) })
		out[i] = mb
		if mb.Id == m.node.ID() {
			out[i] = m.Self()
			out[i].Suffrage = mb.Suffrage
			continue
		}
		if mb.ApiAddr == "" {
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			got, ok := m.viewOf(ctx, mb.ApiAddr)
			if !ok {
				return
			}
			mb.Role, mb.Term, mb.CommitIndex, mb.AppliedIndex = got.GetRole(), got.GetTerm(), got.GetCommitIndex(), got.GetAppliedIndex()
		})
	}
	wg.Wait()
	return leaderID, out, nil
}

// viewOf asks the member whose API is at addr for its own view.
func (m *Manager) viewOf(ctx context.Context, addr string) (*pb.Member, bool) {
	req := connect.NewRequest(&pb.MembersRequest{})
	req.Header().Set(LocalHeader, "1")
	req.Header().Set(ClusterIDHeader, m.node.ClusterID())
	res, err := m.cfg.Peer(addr).Members(ctx, req)
	if err != nil || len(res.Msg.GetMembers()) != 1 {
		return nil, false
	}
	return res.Msg.GetMembers()[0], true
}
