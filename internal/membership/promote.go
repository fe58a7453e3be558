package membership

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/internal/fsm"
)

// promoteInterval is how often the leader looks for caught-up non-voters.
const promoteInterval = 500 * time.Millisecond

// PromoteLoop makes caught-up non-voters voters, on the leader, until stop
// is closed (Consul's autopilot does the same). The caller runs it on a
// goroutine it owns and waits for it; a standalone node, which cannot grow,
// need not run it.
func (m *Manager) PromoteLoop(stop <-chan struct{}) {
	t := time.NewTicker(promoteInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if m.node.IsLeader() {
			m.promoteCaughtUp()
		}
	}
}

// promoteCaughtUp promotes every non-voter that the leader reaches and
// that has applied every entry committed before it was asked.
func (m *Manager) promoteCaughtUp() {
	members, err := m.node.Members()
	if err != nil {
		return
	}
	for _, mb := range members {
		if mb.Voter || !m.node.Reachable(mb.ID) {
			continue
		}
		commit := m.node.Raft().CommitIndex()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		applied, ok := m.appliedIndexOf(ctx, mb.ID)
		if ok && applied >= commit {
			if err := m.node.Promote(ctx, mb.ID); err != nil {
				m.cfg.Logger.Warn("promote member", "id", mb.ID, "err", err)
			} else {
				m.cfg.Logger.Info("member caught up and promoted to voter", "id", mb.ID, "applied", applied)
			}
		}
		cancel()
	}
}

// appliedIndexOf asks member id's API for its applied index.
func (m *Manager) appliedIndexOf(ctx context.Context, id string) (uint64, bool) {
	var addr string
	m.node.Read(func(fm *fsm.Machine) { addr = fm.NodeAPIAddr(id) })
	if addr == "" {
		return 0, false
	}
	got, ok := m.viewOf(ctx, addr)
	if !ok || got.GetId() != id {
		return 0, false
	}
	return got.GetAppliedIndex(), true
}
