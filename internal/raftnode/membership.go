package raftnode

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Membership. A new member joins as a non-voter and becomes a voter only
// once it has caught up (Promote, driven by the server's promoter), so
// adding a member that never starts cannot cost the cluster its quorum.
// A change of the voter set is refused with ErrWouldLoseQuorum when the
// voters after it would not include a quorum of reachable members (etcd's
// strict reconfiguration check). Reachable means: this node (the leader)
// and every voter to which its heartbeats are not failing; raft reports
// failing and resumed heartbeats through observations (peerHealth).

// Member is one server of the Raft configuration.
type Member struct {
	ID       string
	RaftAddr string
	Voter    bool
}

// Members returns the latest Raft configuration.
func (n *Node) Members() ([]Member, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("raftnode: configuration: %w", err)
	}
	var out []Member
	for _, s := range f.Configuration().Servers {
		out = append(out, Member{ID: string(s.ID), RaftAddr: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	return out, nil
}

// Standalone reports whether the node runs without a Raft address: a
// single-node group on an in-memory transport, which cannot grow.
func (n *Node) Standalone() bool { return n.cfg.standalone() }

// ClusterID returns the id of the cluster this node belongs to.
func (n *Node) ClusterID() string { return n.clusterID }

// AddMember adds id at raftAddr as a non-voter. When id is already a
// member at raftAddr it does nothing, unless fresh is set: a member that
// starts over with an empty data dir has lost its log and its votes, so
// it is removed (under the quorum check) and added back as a non-voter,
// to be promoted once it has caught up again; that is refused with
// ErrUnavailable while the old member still answers heartbeats (this
// node's own id included). A member at another address
// keeps its suffrage and takes the new address. It reports whether the
// configuration changed. Leader only.
func (n *Node) AddMember(ctx context.Context, id, raftAddr string, fresh bool) (bool, error) {
	if n.Standalone() {
		return false, ErrStandalone
	}
	members, err := n.Members()
	if err != nil {
		return false, err
	}
	timeout := ctxTimeout(ctx)
	for _, m := range members {
		if m.ID != id {
			continue
		}
		switch {
		case fresh && n.Reachable(id):
			// Its old self still answers heartbeats: either it is about to be
			// noticed as gone (retry), or two nodes use one id.
			return false, fmt.Errorf("%w: member %s at %s still answers; a node that starts over with an empty data dir is added only once its old self is gone (are two nodes using id %s?)", ErrUnavailable, id, m.RaftAddr, id)
		case fresh:
			if m.Voter {
				if err := n.RemoveMember(ctx, id); err != nil {
					return false, err
				}
			}
			return true, n.futureErr(ctx, n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, timeout))
		case m.RaftAddr == raftAddr:
			return false, nil
		case m.Voter:
			return true, n.futureErr(ctx, n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, timeout))
		default:
			return true, n.futureErr(ctx, n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, timeout))
		}
	}
	return true, n.futureErr(ctx, n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, timeout))
}

// RemoveMember removes id from the configuration, unless the voters left
// would not include a quorum of reachable members. Leader only.
func (n *Node) RemoveMember(ctx context.Context, id string) error {
	members, err := n.Members()
	if err != nil {
		return err
	}
	var voters []string
	found := false
	for _, m := range members {
		found = found || m.ID == id
		if m.Voter && m.ID != id {
			voters = append(voters, m.ID)
		}
	}
	if !found {
		return fmt.Errorf("raftnode: no member %q", id)
	}
	if len(voters) == 0 {
		return fmt.Errorf("%w: %q is the last voter", ErrWouldLoseQuorum, id)
	}
	if err := n.checkQuorum(voters); err != nil {
		return err
	}
	return n.futureErr(ctx, n.raft.RemoveServer(raft.ServerID(id), 0, ctxTimeout(ctx)))
}

// Promote makes the non-voter id a voter, unless the voters after that
// would not include a quorum of reachable members. The caller decides
// that id has caught up. Leader only.
func (n *Node) Promote(ctx context.Context, id string) error {
	members, err := n.Members()
	if err != nil {
		return err
	}
	var (
		voters []string
		target *Member
	)
	for _, m := range members {
		if m.Voter || m.ID == id {
			voters = append(voters, m.ID)
		}
		if m.ID == id {
			target = &m
		}
	}
	switch {
	case target == nil:
		return fmt.Errorf("raftnode: no member %q", id)
	case target.Voter:
		return nil
	}
	if err := n.checkQuorum(voters); err != nil {
		return err
	}
	return n.futureErr(ctx, n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(target.RaftAddr), 0, ctxTimeout(ctx)))
}

// Reachable reports whether this node, as leader, hears from member id:
// itself, or a member to which heartbeats are not failing.
func (n *Node) Reachable(id string) bool {
	return id == n.cfg.NodeID || n.health.reachable(id)
}

// checkQuorum refuses a voter set in which fewer than a quorum are
// reachable.
func (n *Node) checkQuorum(voters []string) error {
	if err := n.leaderErr(); err != nil {
		return err
	}
	var up, down []string
	for _, id := range voters {
		if n.Reachable(id) {
			up = append(up, id)
		} else {
			down = append(down, id)
		}
	}
	if quorum := len(voters)/2 + 1; len(up) < quorum {
		return fmt.Errorf("%w: the voters would be %v, a quorum is %d, and only %v are reachable (unreachable: %v)", ErrWouldLoseQuorum, voters, quorum, up, down)
	}
	return nil
}

// futureErr waits for a configuration change and maps its error.
func (n *Node) futureErr(ctx context.Context, f raft.Future) error {
	err := n.await(ctx, f)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader):
		return ErrNotLeader
	case errors.Is(err, errCtxDone), errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: membership change: %w", ErrOutcomeUnknown, err)
	}
	return fmt.Errorf("raftnode: membership change: %w", err)
}

func ctxTimeout(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return max(time.Until(dl), time.Millisecond)
	}
	return 10 * time.Second
}

// peerHealth tracks, on the leader, the peers whose heartbeats fail.
type peerHealth struct {
	mu      sync.Mutex // protects following
	failing map[raft.ServerID]time.Time
}

func (h *peerHealth) reachable(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, bad := h.failing[raft.ServerID(id)]
	return !bad
}

// watch consumes raft observations until done is closed.
func (h *peerHealth) watch(obs <-chan raft.Observation, done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case o := <-obs:
			h.mu.Lock()
			switch d := o.Data.(type) {
			case raft.FailedHeartbeatObservation:
				h.failing[d.PeerID] = d.LastContact
			case raft.ResumedHeartbeatObservation:
				delete(h.failing, d.PeerID)
			case raft.RaftState:
				// A new term's replication starts over; so does what it knows.
				clear(h.failing)
			}
			h.mu.Unlock()
		}
	}
}

func healthFilter(o *raft.Observation) bool {
	switch o.Data.(type) {
	case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation, raft.RaftState:
		return true
	}
	return false
}

// claimAddress records this node's Raft address in the configuration when
// it is the only voter there but recorded at another address: a single
// node started without a Raft port and started again with one, to grow
// (or a sole voter moved to a new address). Members that join then reach
// it at the address it listens on. It runs when the node becomes leader;
// a failure is logged, and the next leadership tries again.
func (n *Node) claimAddress() {
	if n.Standalone() || n.cfg.Transport != nil {
		return
	}
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	servers, self, addr := f.Configuration().Servers, raft.ServerID(n.cfg.NodeID), raft.ServerAddress(n.cfg.RaftAddr)
	if len(servers) != 1 || servers[0].ID != self || servers[0].Suffrage != raft.Voter || servers[0].Address == addr {
		return
	}
	if err := n.raft.AddVoter(self, addr, 0, 10*time.Second).Error(); err != nil {
		n.cfg.Logger.Warn("could not record this node's new Raft address; members cannot join until it is", "node", n.cfg.NodeID, "raft", addr, "recorded", servers[0].Address, "err", err)
		return
	}
	n.cfg.Logger.Info("this node's Raft address is recorded; members can join", "node", n.cfg.NodeID, "raft", addr, "was", servers[0].Address)
}
