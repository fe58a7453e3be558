package server

import (
	"github.com/leasehold/leasehold/internal/authedge"
	"github.com/leasehold/leasehold/internal/fsm"
)

// Authentication and authorization at the API edge are package
// authedge's (the principal, the interceptor, the leader's check, the
// revocation of long-lived requests) around the rules of package auth;
// the server builds its Edge (newEdge) and calls it. The AuthService is in
// authservice.go.

// newEdge returns the authedge.Edge of s: its node secret, its admins,
// its ids, its applied state and the limits' name of a caller.
func newEdge(s *Server) *authedge.Edge {
	return authedge.New(authedge.Config{
		NodeSecret: s.cfg.NodeSecret,
		Admins:     s.cfg.Admins,
		NodeID:     func() string { return s.node.ID() },
		ClusterID:  func() string { return s.node.ClusterID() },
		Read:       func(f func(m *fsm.Machine)) { s.node.Read(f) },
		LimitsName: principal, // admission.go
		Audit:      s.audit,
	})
}
