package server

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/leasehold/leasehold/internal/auth"
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

func (s *Server) auditLog() *slog.Logger { return s.audit }

// policies returns the compiled auth state (nil: disabled).
func (s *Server) policies() *auth.Policies { return s.edge.Policies() }

func (s *Server) revocable(ctx context.Context, proc string, msg any) (context.Context, func()) {
	return s.edge.Revocable(ctx, proc, msg)
}

func (s *Server) reauthenticate(ctx context.Context, path string) (context.Context, error) {
	return s.edge.Reauthenticate(ctx, path)
}

func (s *Server) authorizeOp(ctx context.Context, proc string, msg any) (*auth.Policies, error) {
	return s.edge.AuthorizeOp(ctx, proc, msg)
}

func (s *Server) finishOp(ctx context.Context, pol *auth.Policies, proc string, res any, err error) {
	s.edge.FinishOp(ctx, pol, proc, res, err)
}

func (s *Server) decideAtLeader(ctx context.Context, msg any) error {
	return s.edge.DecideAtLeader(ctx, msg)
}

func (s *Server) setForwardHeaders(ctx context.Context, h http.Header) {
	s.edge.SetForwardHeaders(ctx, h)
}

func revokedErr(ctx context.Context) error { return authedge.Revoked(ctx) }
