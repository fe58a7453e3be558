package server_test

import (
	"bytes"
	"crypto/sha256"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/harness/servertest"
	"github.com/leasehold/leasehold/internal/server"
)

// bearerClients are API clients that send "Authorization: Bearer tok".
type bearerClients struct {
	locks leaseholdv1connect.LeaseholdServiceClient
	auth  leaseholdv1connect.AuthServiceClient
}

type bearerRT struct{ tok string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.tok != "" {
		r.Header.Set("Authorization", "Bearer "+b.tok)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func withToken(t *testing.T, c *servertest.Cluster, tok string) bearerClients {
	hc := &http.Client{Transport: bearerRT{tok}}
	t.Cleanup(hc.CloseIdleConnections)
	return bearerClients{
		locks: leaseholdv1connect.NewLeaseholdServiceClient(hc, c.URL, connect.WithProtoJSON()),
		auth:  leaseholdv1connect.NewAuthServiceClient(hc, c.URL, connect.WithProtoJSON()),
	}
}

// testNodeSecret is the node secret of startAuth's server.
const testNodeSecret = "0123456789abcdef0123456789abcdef"

// startAuth starts a node whose serve --admin is "ops" and that has a node
// secret, and returns it with clients that present the secret: the node
// role, which mints tokens and policies while auth is off and enables it.
func startAuth(t *testing.T) (*servertest.Cluster, bearerClients) {
	t.Helper()
	c := servertest.Start(t, servertest.Options{Configure: func(cfg *server.Config) {
		cfg.Admins = []string{"ops"}
		cfg.NodeSecret = testNodeSecret
	}})
	hc := &http.Client{Transport: headerRT{"Leasehold-Node-Secret": testNodeSecret}}
	t.Cleanup(hc.CloseIdleConnections)
	return c, bearerClients{
		locks: leaseholdv1connect.NewLeaseholdServiceClient(hc, c.URL, connect.WithProtoJSON()),
		auth:  leaseholdv1connect.NewAuthServiceClient(hc, c.URL, connect.WithProtoJSON()),
	}
}

// TestAuthBearerTokens: tokens are returned once and stored as SHA-256
// only; with auth enabled a token's principal is held to its policies and
// its own sessions; a revoked or unknown token is refused.
func TestAuthBearerTokens(t *testing.T) {
	c, node := startAuth(t)
	ctx := ctxT(t)
	anon := withToken(t, c, "")
	mk := func(who string) string {
		res, err := node.auth.CreateToken(ctx, req(&pb.CreateTokenRequest{Principal: who}))
		mustOK(t, "create token "+who, err)
		return res.Msg.GetToken()
	}
	opsTok, aliceTok, eveTok := mk("ops"), mk("alice"), mk("eve")

	// Stored hashed: the state holds SHA-256(token), never the token.
	state := c.State()
	for _, tok := range []string{opsTok, aliceTok, eveTok} {
		sum := sha256.Sum256([]byte(tok))
		if bytes.Contains(state, []byte(tok)) || bytes.Contains(state, []byte(tok[len(tok)-64:])) {
			t.Fatal("the state contains a bearer token")
		}
		if !bytes.Contains(state, sum[:]) {
			t.Fatal("the state lacks a token's SHA-256")
		}
	}

	ops, alice, eve := withToken(t, c, opsTok), withToken(t, c, aliceTok), withToken(t, c, eveTok)
	for _, p := range []*pb.Policy{
		{Name: "alice", Principals: []string{"alice"}, Permissions: []string{"lock", "read"}, Prefixes: []string{"job:"}},
		{Name: "eve", Principals: []string{"eve"}, Permissions: []string{"lock", "read"}, Prefixes: []string{"job:"}},
	} {
		_, err := node.auth.SetPolicy(ctx, req(&pb.SetPolicyRequest{Policy: p}))
		mustOK(t, "set policy", err)
	}
	_, err := node.auth.SetEnabled(ctx, req(&pb.SetEnabledRequest{Enabled: true}))
	mustOK(t, "the node enables auth", err)

	_, err = anon.locks.CreateSession(ctx, req(&pb.CreateSessionRequest{TtlMs: 10000}))
	wantCode(t, "anonymous creates a session", err, api.CodePermissionDenied)
	_, err = withToken(t, c, "lh.0000000000000000."+string(bytes.Repeat([]byte("0"), 64))).locks.List(ctx, req(&pb.ListRequest{Prefix: "job:"}))
	wantCode(t, "unknown token", err, api.CodePermissionDenied)

	s, err := alice.locks.CreateSession(ctx, req(&pb.CreateSessionRequest{TtlMs: 10000, Owner: "alice"}))
	mustOK(t, "alice session", err)
	lease := s.Msg.GetLeaseId()
	h, err := alice.locks.Acquire(ctx, req(&pb.AcquireRequest{Name: "job:1", LeaseId: lease}))
	mustOK(t, "alice acquires", err)

	// Lease takeover with an observed lease id.
	_, err = eve.locks.Release(ctx, req(&pb.ReleaseRequest{Name: "job:1", LeaseId: lease, Token: h.Msg.GetHolding().GetToken()}))
	wantCode(t, "eve releases alice's lock", err, api.CodePermissionDenied)
	_, err = eve.locks.KeepAlive(ctx, req(&pb.KeepAliveRequest{LeaseId: lease}))
	wantCode(t, "eve renews alice's session", err, api.CodePermissionDenied)
	eves, err := eve.locks.CreateSession(ctx, req(&pb.CreateSessionRequest{TtlMs: 10000, Owner: "eve"}))
	mustOK(t, "eve session", err)
	_, err = eve.locks.KeepAlive(ctx, req(&pb.KeepAliveRequest{LeaseIds: []string{eves.Msg.GetLeaseId(), lease}}))
	wantCode(t, "eve renews alice's session in a batch", err, api.CodePermissionDenied)
	_, err = eve.locks.KeepAlive(ctx, req(&pb.KeepAliveRequest{LeaseIds: []string{eves.Msg.GetLeaseId()}}))
	mustOK(t, "eve renews her own session in a batch", err)
	ls, err := eve.locks.List(ctx, req(&pb.ListRequest{Prefix: "job:"}))
	mustOK(t, "eve lists", err)
	if got := ls.Msg.GetLocks()[0].GetHolder(); got.GetLeaseId() != "" || got.GetOwner() != "alice" {
		t.Fatalf("eve sees %+v: want the owner, lease id redacted", got)
	}
	_, err = eve.locks.List(ctx, req(&pb.ListRequest{Prefix: ""}))
	wantCode(t, "eve lists outside her prefix", err, api.CodePermissionDenied)
	ls, err = ops.locks.List(ctx, req(&pb.ListRequest{Prefix: ""}))
	mustOK(t, "ops lists", err)
	if ls.Msg.GetLocks()[0].GetHolder().GetLeaseId() != lease {
		t.Fatal("an admin sees lease ids")
	}

	// Revoking alice's token takes effect at once.
	toks, err := ops.auth.ListTokens(ctx, req(&pb.ListTokensRequest{}))
	mustOK(t, "list tokens", err)
	for _, tk := range toks.Msg.GetTokens() {
		if tk.GetPrincipal() == "alice" {
			_, err = ops.auth.RevokeToken(ctx, req(&pb.RevokeTokenRequest{Id: tk.GetId()}))
			mustOK(t, "revoke", err)
		}
	}
	_, err = alice.locks.KeepAlive(ctx, req(&pb.KeepAliveRequest{LeaseId: lease}))
	wantCode(t, "revoked token", err, api.CodePermissionDenied)

}

type headerRT map[string]string

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestAuthForwardedPrincipal: the Leasehold-Principal header is believed
// only from a node (here: a caller with the node secret) of this cluster,
// and then the request is decided as that principal, never as the node.
func TestAuthForwardedPrincipal(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef"
	c := servertest.Start(t, servertest.Options{Configure: func(cfg *server.Config) {
		cfg.Admins = []string{"ops"}
		cfg.NodeSecret = secret
	}})
	ctx := ctxT(t)
	clusterID := c.Server().Node().ClusterID()
	as := func(h headerRT) bearerClients {
		hc := &http.Client{Transport: h}
		t.Cleanup(hc.CloseIdleConnections)
		return bearerClients{
			locks: leaseholdv1connect.NewLeaseholdServiceClient(hc, c.URL, connect.WithProtoJSON()),
			auth:  leaseholdv1connect.NewAuthServiceClient(hc, c.URL, connect.WithProtoJSON()),
		}
	}
	node := as(headerRT{"Leasehold-Node-Secret": secret})
	opsTok, err := node.auth.CreateToken(ctx, req(&pb.CreateTokenRequest{Principal: "ops"}))
	mustOK(t, "token", err)
	_, err = node.auth.SetPolicy(ctx, req(&pb.SetPolicyRequest{Policy: &pb.Policy{Name: "r", Principals: []string{"reader"}, Permissions: []string{"read"}}}))
	mustOK(t, "policy", err)
	_, err = node.auth.SetEnabled(ctx, req(&pb.SetEnabledRequest{Enabled: true}))
	mustOK(t, "enable", err)

	fwd := func(who, sec string) bearerClients {
		return as(headerRT{"Leasehold-Principal": who, "Leasehold-Forwarded-By": "n9", "Leasehold-Cluster-Id": clusterID, "Leasehold-Node-Secret": sec})
	}
	// From a node: decided as the principal it names.
	_, err = fwd("reader", secret).locks.List(ctx, req(&pb.ListRequest{}))
	mustOK(t, "reader's read forwarded by a node", err)
	_, err = fwd("reader", secret).locks.CreateSession(ctx, req(&pb.CreateSessionRequest{TtlMs: 10000}))
	wantCode(t, "reader's write forwarded by a node", err, api.CodePermissionDenied)
	_, err = fwd("ops", secret).auth.ListTokens(ctx, req(&pb.ListTokensRequest{}))
	mustOK(t, "ops forwarded by a node", err)
	// From anyone else: refused, whatever it names.
	_, err = fwd("ops", "").auth.ListTokens(ctx, req(&pb.ListTokensRequest{}))
	wantCode(t, "forged principal header", err, api.CodePermissionDenied)
	_, err = fwd("ops", secret[1:]+"x").auth.ListTokens(ctx, req(&pb.ListTokensRequest{}))
	wantCode(t, "wrong node secret", err, api.CodePermissionDenied)
	_, err = as(headerRT{"Leasehold-Principal": "ops", "Authorization": "Bearer " + opsTok.Msg.GetToken()}).locks.List(ctx, req(&pb.ListRequest{}))
	wantCode(t, "an admin's token does not make the header believed", err, api.CodePermissionDenied)
	// The node itself (no principal header) is a node.
	_, err = as(headerRT{"Leasehold-Node-Secret": secret}).auth.ListTokens(ctx, req(&pb.ListTokensRequest{}))
	mustOK(t, "a node", err)
}

// TestAuthNoLeaseIDsOfOthers: with auth on, a TryAcquire refused because
// another principal holds the name, and a Release whose next holder is
// another principal's session, name no lease id of theirs.
func TestAuthNoLeaseIDsOfOthers(t *testing.T) {
	c, node := startAuth(t)
	ctx := ctxT(t)
	mk := func(who string) bearerClients {
		res, err := node.auth.CreateToken(ctx, req(&pb.CreateTokenRequest{Principal: who}))
		mustOK(t, "create token "+who, err)
		return withToken(t, c, res.Msg.GetToken())
	}
	ops, alice, eve := mk("ops"), mk("alice"), mk("eve")
	_, err := node.auth.SetPolicy(ctx, req(&pb.SetPolicyRequest{Policy: &pb.Policy{Name: "jobs", Principals: []string{"alice", "eve"}, Permissions: []string{"lock"}, Prefixes: []string{"job:"}}}))
	mustOK(t, "set policy", err)
	_, err = node.auth.SetEnabled(ctx, req(&pb.SetEnabledRequest{Enabled: true}))
	mustOK(t, "enable", err)

	as, err := alice.locks.CreateSession(ctx, req(&pb.CreateSessionRequest{TtlMs: 10000, Owner: "alice"}))
	mustOK(t, "alice session", err)
	h, err := alice.locks.Acquire(ctx, req(&pb.AcquireRequest{Name: "job:1", LeaseId: as.Msg.GetLeaseId()}))
	mustOK(t, "alice acquires", err)
	es, err := eve.locks.CreateSession(ctx, req(&pb.CreateSessionRequest{TtlMs: 10000, Owner: "eve"}))
	mustOK(t, "eve session", err)
	_, err = eve.locks.TryAcquire(ctx, req(&pb.TryAcquireRequest{Name: "job:1", LeaseId: es.Msg.GetLeaseId()}))
	wantCode(t, "eve tries alice's lock", err, api.CodeLocked)
	if strings.Contains(err.Error(), as.Msg.GetLeaseId()) {
		t.Fatalf("the locked error names alice's lease id: %v", err)
	}

	queued := make(chan error, 1)
	go func() {
		_, err := eve.locks.Acquire(ctx, req(&pb.AcquireRequest{Name: "job:1", LeaseId: es.Msg.GetLeaseId()}))
		queued <- err
	}()
	if err := servertest.Eventually(5*time.Second, func() bool {
		st, err := ops.locks.Status(ctx, req(&pb.StatusRequest{Name: "job:1"}))
		return err == nil && len(st.Msg.GetLock().GetWaiters()) == 1
	}); err != nil {
		t.Fatal("eve never queued")
	}
	rel, err := alice.locks.Release(ctx, req(&pb.ReleaseRequest{Name: "job:1", LeaseId: as.Msg.GetLeaseId(), Token: h.Msg.GetHolding().GetToken()}))
	mustOK(t, "alice releases", err)
	if n := rel.Msg.GetNext(); n.GetOwner() != "eve" || n.GetLeaseId() != "" {
		t.Fatalf("alice's release names the next holder %+v; want eve's owner label, no lease id", n)
	}
	mustOK(t, "eve's queued acquire", <-queued)
}

// TestAuthBootstrapNeedsUnmintableCredential: while auth is off anyone may
// call the AuthService, so a token proves nothing then. Minting tokens and
// policies while auth is off, and enabling auth, need the node role (here
// the node secret) or a serve --admin principal proven by its certificate:
// an anonymous caller cannot mint a token (not for the --admin principal,
// not for anyone) or a policy, and the --admin principal's token cannot
// enable auth. Once auth is on, the policies decide as before.
func TestAuthBootstrapNeedsUnmintableCredential(t *testing.T) {
	c, node := startAuth(t)
	ctx := ctxT(t)
	anon := withToken(t, c, "")
	for _, who := range []string{"ops", "mallory"} {
		_, err := anon.auth.CreateToken(ctx, req(&pb.CreateTokenRequest{Principal: who}))
		wantCode(t, "anonymous mints a token for "+who+" while auth is off", err, api.CodePermissionDenied)
	}
	_, err := anon.auth.SetPolicy(ctx, req(&pb.SetPolicyRequest{Policy: &pb.Policy{Name: "m", Principals: []string{"mallory"}, Permissions: []string{"admin"}}}))
	wantCode(t, "anonymous sets a policy while auth is off", err, api.CodePermissionDenied)
	_, err = anon.auth.SetEnabled(ctx, req(&pb.SetEnabledRequest{Enabled: true}))
	wantCode(t, "anonymous enables auth", err, api.CodePermissionDenied)

	res, err := node.auth.CreateToken(ctx, req(&pb.CreateTokenRequest{Principal: "ops"}))
	mustOK(t, "the node mints ops's token", err)
	ops := withToken(t, c, res.Msg.GetToken())
	_, err = ops.auth.CreateToken(ctx, req(&pb.CreateTokenRequest{Principal: "ci"}))
	wantCode(t, "the --admin principal by token mints a token while auth is off", err, api.CodePermissionDenied)
	_, err = ops.auth.SetEnabled(ctx, req(&pb.SetEnabledRequest{Enabled: true}))
	wantCode(t, "the --admin principal by token enables auth", err, api.CodePermissionDenied)
	if st, err := anon.auth.Status(ctx, req(&pb.AuthStatusRequest{})); err != nil || st.Msg.GetEnabled() || st.Msg.GetTokens() != 1 || st.Msg.GetPolicies() != 0 {
		t.Fatalf("auth status after the refusals: %v %v; want off, 1 token, no policy", st, err)
	}

	_, err = node.auth.SetEnabled(ctx, req(&pb.SetEnabledRequest{Enabled: true}))
	mustOK(t, "the node enables auth", err)
	_, err = ops.auth.CreateToken(ctx, req(&pb.CreateTokenRequest{Principal: "ci"}))
	mustOK(t, "ops (admin) mints a token with auth on", err)
	_, err = ops.auth.SetPolicy(ctx, req(&pb.SetPolicyRequest{Policy: &pb.Policy{Name: "ci", Principals: []string{"ci"}, Permissions: []string{"lock"}}}))
	mustOK(t, "ops (admin) sets a policy with auth on", err)
}
