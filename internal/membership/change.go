package membership

import (
	"context"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// Growable refuses, with invalid-argument, to add members to a standalone
// node (one without a Raft address), and says how to grow it.
func (m *Manager) Growable() error {
	if m.node.Standalone() {
		return api.Errorf(api.CodeInvalidArgument, "node %s runs without a Raft address: to grow it, stop it and start it again on the same --data and --node-id with --raft-addr HOST:PORT, then add members with --join", m.node.ID())
	}
	return nil
}

// Add, on the leader, adds member id as a non-voter (promoted once caught
// up, see PromoteLoop), re-adds a fresh member that lost its data as a
// non-voter, or, when the member exists at raftAddr, changes nothing in
// raft; then it records the member's API address in the replicated state.
func (m *Manager) Add(ctx context.Context, id, raftAddr, apiAddr string, fresh bool) error {
	changed, err := m.node.AddMember(ctx, id, raftAddr, fresh)
	if err != nil {
		return err
	}
	if changed {
		m.cfg.Logger.Info("member added as a non-voter", "id", id, "raft_addr", raftAddr, "fresh", fresh)
	}
	_, err = m.cfg.Apply(ctx, &fsmpb.Command{Op: &fsmpb.Command_RegisterNode{RegisterNode: &fsmpb.RegisterNode{Id: id, ApiAddr: apiAddr}}})
	return err
}

// Remove, on the leader, removes member id, unless the voters left would
// not include a quorum of reachable members.
func (m *Manager) Remove(ctx context.Context, id string) error {
	if err := m.node.RemoveMember(ctx, id); err != nil {
		return err
	}
	m.cfg.Logger.Info("member removed", "id", id)
	return nil
}

// TransferLeader, on the leader, hands leadership to member id (any voter
// when id is empty) and returns the new leader's id once this node has
// heard from it.
func (m *Manager) TransferLeader(ctx context.Context, id string) (string, error) {
	r := m.node.Raft()
	if id == m.node.ID() {
		// Already there: leadership may have moved on its own between
		// the caller's look at the cluster and this request.
		return m.node.ID(), nil
	}
	var f raft.Future
	if id == "" {
		f = r.LeadershipTransfer()
	} else {
		cf := r.GetConfiguration()
		if err := cf.Error(); err != nil {
			return "", err
		}
		var target *raft.Server
		for _, srv := range cf.Configuration().Servers {
			if string(srv.ID) == id {
				target = &srv
			}
		}
		if target == nil {
			return "", api.Errorf(api.CodeInvalidArgument, "no member %q", id)
		}
		f = r.LeadershipTransferToServer(target.ID, target.Address)
	}
	if err := f.Error(); err != nil {
		return "", api.Errorf(api.CodeUnavailable, "leadership transfer: %v", err)
	}
	// The transfer is done once another node leads; wait until this
	// node has heard from it, so the answer names the new leader.
	for {
		if leader, _ := m.node.Leader(); leader != "" && leader != m.node.ID() {
			return leader, nil
		}
		select {
		case <-ctx.Done():
			return "", api.Errorf(api.CodeDeadlineExceeded, "leadership transferred, new leader not heard from yet")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
