package server

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/authedge"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// The AuthService: turning auth on and off, tokens and policies, each a
// command of the replicated auth state proposed on the leader.

// authService implements leaseholdv1connect.AuthServiceHandler.
type authService struct{ s *Server }

type authClient = leaseholdv1connect.AuthServiceClient

// authToAPI maps the auth errors to API codes.
func authToAPI(err error) error {
	switch {
	case errors.Is(err, auth.ErrInvalid):
		return api.Errorf(api.CodeInvalidArgument, "%v", err)
	case errors.Is(err, fsm.ErrAuthNotFound):
		return api.Errorf(api.CodeNotFound, "%v", err)
	case errors.Is(err, fsm.ErrAuthLimit):
		return api.Errorf(api.CodeResourceExhausted, "%v", err)
	}
	return err
}

// leaderAuth runs local on the leader, or forwards the request to it.
func leaderAuth[Req, Res any](ctx context.Context, s *Server, req *connect.Request[Req],
	local func(context.Context, *Req) (*Res, error),
	remote func(authClient, context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
) (*connect.Response[Res], error) {
	leader := func() (authClient, error) {
		addr, err := s.forwardAddr()
		if err != nil {
			return nil, err
		}
		return leaseholdv1connect.NewAuthServiceClient(s.http, s.peerURL(addr), connect.WithGRPC()), nil
	}
	return onLeaderVia(ctx, s, req, local, remote, leader, func(err error) error { return toAPI(authToAPI(err)) })
}

// bootstrapCredential reports whether the caller of ctx proved a
// credential that nobody could mint while auth was off
// (auth.Authenticator.BootstrapCredential): the node role, or a principal
// named by serve --admin proven by its verified client certificate.
func (s *Server) bootstrapCredential(ctx context.Context) bool {
	return s.edge.BootstrapCredential(ctx)
}

// needBootstrapCredential refuses what (enabling auth, or minting a token
// or a policy while auth is off) the caller may do only with
// bootstrapCredential.
func (s *Server) needBootstrapCredential(ctx context.Context, what string) error {
	if s.bootstrapCredential(ctx) {
		return nil
	}
	return api.ToConnect(api.Errorf(api.CodePermissionDenied, "%s needs the node role (a node certificate or the node secret) or a principal named by serve --admin proven by its client certificate, not %s: while auth is off anyone may mint a token", what, authedge.Principal(ctx)))
}

// needWhileOff is needBootstrapCredential while auth is off: with auth on,
// the policies decide (admin).
func (s *Server) needWhileOff(ctx context.Context, what string) error {
	if s.edge.Policies().On() {
		return nil
	}
	return s.needBootstrapCredential(ctx, what+" while auth is off")
}

func (a *authService) SetEnabled(ctx context.Context, req *connect.Request[pb.SetEnabledRequest]) (*connect.Response[pb.SetEnabledResponse], error) {
	s := a.s
	if req.Msg.GetEnabled() {
		// Not with a token, which anyone could have minted while auth was
		// off; the caller is an admin once auth is on.
		if err := s.needBootstrapCredential(ctx, "auth enable"); err != nil {
			return nil, err
		}
	}
	return leaderAuth(ctx, s, req, func(ctx context.Context, m *pb.SetEnabledRequest) (*pb.SetEnabledResponse, error) {
		if _, err := s.apply(ctx, &fsmpb.Command{Op: &fsmpb.Command_AuthEnable{AuthEnable: &fsmpb.AuthEnable{Enabled: m.GetEnabled()}}}); err != nil {
			return nil, err
		}
		return &pb.SetEnabledResponse{Enabled: m.GetEnabled()}, nil
	}, authClient.SetEnabled)
}

func (a *authService) Status(ctx context.Context, _ *connect.Request[pb.AuthStatusRequest]) (*connect.Response[pb.AuthStatusResponse], error) {
	pol := a.s.edge.Policies()
	p := authedge.Principal(ctx)
	st := pol.State()
	res := &pb.AuthStatusResponse{Enabled: pol.On(), Principal: p.Name, Policies: int32(len(st.GetPolicies())), Tokens: int32(len(st.GetTokens()))}
	if p.Node {
		res.Roles = append(res.Roles, "node")
	}
	if p.Admin || auth.Compile(&fsmpb.AuthState{Enabled: true, Policies: st.GetPolicies()}).IsAdmin(p) {
		res.Roles = append(res.Roles, "admin")
	}
	return connect.NewResponse(res), nil
}

func (a *authService) CreateToken(ctx context.Context, req *connect.Request[pb.CreateTokenRequest]) (*connect.Response[pb.CreateTokenResponse], error) {
	s := a.s
	if !auth.ValidPrincipal(req.Msg.GetPrincipal()) {
		return nil, api.ToConnect(api.Errorf(api.CodeInvalidArgument, "principal %q: want 1..64 of A-Z a-z 0-9 . _ - @, not starting with '.', not %q", req.Msg.GetPrincipal(), auth.NodeName))
	}
	if err := s.needWhileOff(ctx, "auth token create"); err != nil {
		return nil, err
	}
	return leaderAuth(ctx, s, req, func(ctx context.Context, m *pb.CreateTokenRequest) (*pb.CreateTokenResponse, error) {
		tok, rec := auth.NewToken(m.GetPrincipal(), s.clock.Now().UnixMilli())
		if _, err := s.apply(ctx, &fsmpb.Command{Op: &fsmpb.Command_AuthPutToken{AuthPutToken: &fsmpb.AuthPutToken{Token: rec}}}); err != nil {
			return nil, err
		}
		return &pb.CreateTokenResponse{Id: rec.GetId(), Principal: rec.GetPrincipal(), Token: tok}, nil
	}, authClient.CreateToken)
}

func (a *authService) RevokeToken(ctx context.Context, req *connect.Request[pb.RevokeTokenRequest]) (*connect.Response[pb.RevokeTokenResponse], error) {
	s := a.s
	return leaderAuth(ctx, s, req, func(ctx context.Context, m *pb.RevokeTokenRequest) (*pb.RevokeTokenResponse, error) {
		if _, err := s.apply(ctx, &fsmpb.Command{Op: &fsmpb.Command_AuthRevokeToken{AuthRevokeToken: &fsmpb.AuthRevokeToken{Id: m.GetId()}}}); err != nil {
			return nil, err
		}
		return &pb.RevokeTokenResponse{}, nil
	}, authClient.RevokeToken)
}

func (a *authService) ListTokens(ctx context.Context, _ *connect.Request[pb.ListTokensRequest]) (*connect.Response[pb.ListTokensResponse], error) {
	res := &pb.ListTokensResponse{}
	for _, t := range a.s.edge.Policies().Tokens() {
		res.Tokens = append(res.Tokens, &pb.TokenInfo{Id: t.GetId(), Principal: t.GetPrincipal(), CreatedUnixMs: t.GetCreatedUnixMs()})
	}
	return connect.NewResponse(res), nil
}

func (a *authService) SetPolicy(ctx context.Context, req *connect.Request[pb.SetPolicyRequest]) (*connect.Response[pb.SetPolicyResponse], error) {
	s := a.s
	p := req.Msg.GetPolicy()
	rec := &fsmpb.AuthPolicy{Name: p.GetName(), Principals: p.GetPrincipals(), Permissions: p.GetPermissions(), Prefixes: p.GetPrefixes()}
	if err := auth.ValidatePolicy(rec); err != nil {
		return nil, api.ToConnect(authToAPI(err))
	}
	if err := checkPolicyBytes(rec); err != nil {
		return nil, api.ToConnect(err)
	}
	if err := s.needWhileOff(ctx, "auth policy set"); err != nil {
		return nil, err
	}
	return leaderAuth(ctx, s, req, func(ctx context.Context, _ *pb.SetPolicyRequest) (*pb.SetPolicyResponse, error) {
		if _, err := s.apply(ctx, &fsmpb.Command{Op: &fsmpb.Command_AuthPutPolicy{AuthPutPolicy: &fsmpb.AuthPutPolicy{Policy: rec}}}); err != nil {
			return nil, err
		}
		return &pb.SetPolicyResponse{}, nil
	}, authClient.SetPolicy)
}

func (a *authService) ListPolicies(ctx context.Context, _ *connect.Request[pb.ListPoliciesRequest]) (*connect.Response[pb.ListPoliciesResponse], error) {
	res := &pb.ListPoliciesResponse{}
	for _, p := range a.s.edge.Policies().State().GetPolicies() {
		res.Policies = append(res.Policies, &pb.Policy{Name: p.GetName(), Principals: p.GetPrincipals(), Permissions: p.GetPermissions(), Prefixes: p.GetPrefixes()})
	}
	return connect.NewResponse(res), nil
}

func (a *authService) DeletePolicy(ctx context.Context, req *connect.Request[pb.DeletePolicyRequest]) (*connect.Response[pb.DeletePolicyResponse], error) {
	s := a.s
	return leaderAuth(ctx, s, req, func(ctx context.Context, m *pb.DeletePolicyRequest) (*pb.DeletePolicyResponse, error) {
		if _, err := s.apply(ctx, &fsmpb.Command{Op: &fsmpb.Command_AuthDeletePolicy{AuthDeletePolicy: &fsmpb.AuthDeletePolicy{Name: m.GetName()}}}); err != nil {
			return nil, err
		}
		return &pb.DeletePolicyResponse{}, nil
	}, authClient.DeletePolicy)
}
