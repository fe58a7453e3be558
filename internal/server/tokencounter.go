package server

import (
	"context"

	"github.com/leasehold/leasehold/internal/fsm"
)

// tokenNode adapts the server to httpedge.TokenNode (the token counter).
type tokenNode struct{ s *Server }

func (t tokenNode) ID() string { return t.s.node.ID() }

// LeaderToken reads the newest token after a read index: linearizable.
func (t tokenNode) LeaderToken(ctx context.Context) (uint64, bool, error) {
	s := t.s
	if !s.node.IsLeader() {
		return 0, false, nil
	}
	if err := s.node.ReadIndex(ctx); err != nil {
		if isNotLeader(err) {
			return 0, false, nil
		}
		return 0, false, toAPI(err)
	}
	var n uint64
	s.node.Read(func(m *fsm.Machine) { n = m.Token() })
	return n, true, nil
}

func (t tokenNode) LeaderURL() (string, error) {
	addr, err := t.s.leaderAPIAddr()
	if err != nil {
		return "", err
	}
	return t.s.peerURL(addr), nil
}
