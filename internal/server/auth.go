package server

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/fsm"
)

// Authentication and authorization at the API edge.
//
//	HTTP request ─► authenticate (middleware): mTLS CN, bearer token, or the
//	                forwarded principal header when a node of this cluster sends it
//	             ─► authz (connect interceptor): permission on the name, session ownership,
//	                lease ids redacted in answers; audit lines
//
// The rules are package auth's (Authenticator, Decide, Redact); this file
// is their glue: it reads the headers and the connection, keeps the
// principal in the context, maps a refusal to permission-denied and writes
// the audit lines. The policies are the replicated state (fsm auth.go)
// compiled by each node after every change (Server.pol), so a check never
// waits on Raft, and with auth disabled it is one atomic load and a branch.
// The AuthService is in authservice.go.

// nodeSecretHeader carries Config.NodeSecret on calls between nodes.
const nodeSecretHeader = "Leasehold-Node-Secret"

// withNodeSecret makes hc send the node secret with every request. When
// hc is a TLS client (httpedge.PeerClient with a TLS config), a request that is not
// https:// fails before anything is sent: the secret makes its bearer a
// node, so it never travels in clear from a node that speaks TLS.
func withNodeSecret(hc *http.Client, secret string) *http.Client {
	if secret == "" {
		return hc
	}
	ht, ok := hc.Transport.(*http.Transport)
	hc.Transport = nodeSecretTransport{rt: hc.Transport, secret: secret, tlsOnly: ok && ht.TLSClientConfig != nil}
	return hc
}

type nodeSecretTransport struct {
	rt      http.RoundTripper
	secret  string
	tlsOnly bool
}

func (t nodeSecretTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.tlsOnly && r.URL.Scheme != "https" {
		return nil, api.Errorf(api.CodeInvalidArgument, "refusing to send the node secret to %s: this node speaks TLS to other nodes, give an https:// address", r.URL.Redacted())
	}
	r = r.Clone(r.Context())
	r.Header.Set(nodeSecretHeader, t.secret)
	return t.rt.RoundTrip(r)
}

func (t nodeSecretTransport) CloseIdleConnections() {
	if c, ok := t.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// principalHeader (admission.go) carries the original caller when a node
// forwards a request: a principal's name, nodeValue for a node, or for an
// anonymous caller the limits' name of it ("ip:…", "token:…"). Names never
// contain ':' (certificate CNs and token principals are checked with
// auth.ValidPrincipal), so the forms do not mix. Only another node of the
// same cluster (a node certificate or the node secret) may send it.
const nodeValue = auth.ForwardedNode

type authPrincipalKey struct{}

// authn is what the middleware stores for an authenticated caller: the
// principal, and the connection's TLS state a LockStream needs to
// authenticate its messages again (lockstream.go).
type authn struct {
	p      auth.Principal
	tls    *tls.ConnectionState
	header http.Header // the request's headers, to authenticate it again
}

// principalFrom returns the caller authenticated by the middleware.
func principalFrom(ctx context.Context) auth.Principal {
	a, _ := ctx.Value(authPrincipalKey{}).(authn)
	return a.p
}

// policies returns the compiled auth state (nil: disabled).
func (s *Server) policies() *auth.Policies {
	if s.authReload.Load() && s.authReload.Swap(false) {
		var p *auth.Policies
		s.node.Read(func(m *fsm.Machine) { p = m.Auth() })
		s.pol.Store(p)
	}
	return s.pol.Load()
}

// authState is the Server's view of the replicated auth state.
type authState struct {
	pol        atomic.Pointer[auth.Policies] // the compiled policies; nil: disabled
	authReload atomic.Bool                   // set by a restore: pol must be read from the state
	audit      *slog.Logger
	authr      auth.Authenticator // finds the caller of a request

	changeMu sync.Mutex    // protects following
	changed  chan struct{} // closed (and replaced) when the auth state changes
}

// observeAuth refreshes the compiled policies after an applied entry, or
// marks them for reading from the state after a restore (res nil), and
// wakes everything that decided on the previous auth state (authChanged).
func (s *Server) observeAuth(res *fsm.Result) {
	switch {
	case res == nil:
		s.authReload.Store(true)
	case res.Auth != nil:
		s.pol.Store(res.Auth)
	default:
		return
	}
	s.changeMu.Lock()
	if s.changed != nil {
		close(s.changed)
	}
	s.changed = make(chan struct{})
	s.changeMu.Unlock()
}

// authChanged returns a channel closed at the next change of the auth
// state (a token created or revoked, a policy set or deleted, the switch,
// a restore) applied on this node. A long-lived request takes it before
// it decides, and decides again (recheck) when it is closed.
func (s *Server) authChanged() <-chan struct{} {
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	if s.changed == nil {
		s.changed = make(chan struct{})
	}
	return s.changed
}

// recheck decides again, under the auth state as it is now, whether the
// caller of the long-lived request ctx may still do proc with msg: its
// credentials are authenticated again (a revoked token fails) and its
// permission decided again (a deleted policy fails). nil, or
// permission-denied.
func (s *Server) recheck(ctx context.Context, proc string, msg any) error {
	ctx, err := s.reauthenticate(ctx, proc)
	if err != nil {
		return err
	}
	if pol := s.policies(); pol.On() {
		return s.decideAudited(ctx, pol, proc, msg)
	}
	return nil
}

// revocable returns a context that ends with a permission-denied cause
// (revokedErr) as soon as an auth change applied on this node leaves the
// caller of ctx unable to do proc with msg. stop ends the watch and waits
// for its goroutine; call it when the request ends.
func (s *Server) revocable(ctx context.Context, proc string, msg any) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	changed := s.authChanged()
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
			changed = s.authChanged()
			if err := s.recheck(ctx, proc, msg); err != nil {
				cancel(err)
				return
			}
		}
	}()
	return ctx, func() { cancel(nil); <-done }
}

// revokedErr is the permission-denied error that ended ctx (revocable),
// or nil when ctx did not end for that.
func revokedErr(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	if err := context.Cause(ctx); api.CodeOf(err) == api.CodePermissionDenied {
		return api.ToConnect(err)
	}
	return nil
}

func (s *Server) auditLog() *slog.Logger { return s.audit }

// authenticate is the HTTP middleware that finds the caller
// (auth.Authenticator.Authenticate).
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := credentials(r.TLS, r.Header)
		if c.None() {
			next.ServeHTTP(w, r) // anonymous: the zero Principal
			return
		}
		p, err := s.authr.Authenticate(c)
		if err != nil {
			err = deniedToAPI(err)
			s.auditLog().Warn("audit", "action", "authenticate", "path", r.URL.Path, "principal", p.String(), "result", "denied", "reason", err.Error())
			writeDenied(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), authPrincipalKey{}, authn{p: p, tls: r.TLS, header: r.Header})))
	})
}

// newAuthenticator returns the Authenticator of s: its node secret, its
// admins, its cluster id and its policies.
func newAuthenticator(s *Server) auth.Authenticator {
	return auth.Authenticator{
		NodeSecret: s.cfg.NodeSecret,
		Admins:     s.cfg.Admins,
		ClusterID:  func() string { return s.node.ClusterID() },
		Policies:   s.policies,
	}
}

// nodeCredential reports whether a request came with a node certificate
// or this cluster's node secret (auth.Authenticator.NodeCredential).
func (s *Server) nodeCredential(cs *tls.ConnectionState, h http.Header) bool {
	return s.authr.NodeCredential(cs, h.Get(nodeSecretHeader))
}

// credentials are the credentials a request with connection state cs and
// headers h presents.
func credentials(cs *tls.ConnectionState, h http.Header) auth.Credentials {
	return auth.Credentials{
		TLS:        cs,
		Forwarded:  h.Get(principalHeader),
		Bearer:     h.Get("Authorization"),
		NodeSecret: h.Get(nodeSecretHeader),
		ClusterID:  h.Get(clusterIDHeader),
	}
}

// reauthenticate authenticates the caller of a long-lived request again
// from its headers and connection, as authenticate did when it began, so
// that a token revoked since is refused: ctx carries the new principal.
// An anonymous caller stays anonymous (decided by the policies).
func (s *Server) reauthenticate(ctx context.Context, path string) (context.Context, error) {
	a, ok := ctx.Value(authPrincipalKey{}).(authn)
	if !ok {
		return ctx, nil
	}
	p, err := s.authr.Authenticate(credentials(a.tls, a.header))
	if err != nil {
		err = deniedToAPI(err)
		s.auditLog().Warn("audit", "action", "authenticate", "path", path, "principal", p.String(), "result", "denied", "reason", err.Error())
		return ctx, err
	}
	return context.WithValue(ctx, authPrincipalKey{}, authn{p: p, tls: a.tls, header: a.header}), nil
}

// writeDenied answers a request refused before it reached its handler, in
// the protocol it spoke.
func writeDenied(w http.ResponseWriter, r *http.Request, err error) {
	ce := api.ToConnect(err)
	w.Header().Set(api.CodeHeader, string(api.CodePermissionDenied))
	ct := r.Header.Get("Content-Type")
	if strings.HasPrefix(ct, "application/grpc") {
		w.Header().Set("Content-Type", ct)
		w.Header().Set("Grpc-Status", "7") // PERMISSION_DENIED
		w.Header().Set("Grpc-Message", ce.Message())
		w.WriteHeader(http.StatusOK)
		return
	}
	http.Error(w, `{"code":"permission_denied","message":`+quoteJSON(ce.Message())+`}`, http.StatusForbidden)
}

func quoteJSON(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20:
			b.WriteString(" ")
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// adminOnly lets only admins (and nodes) reach next once auth is enabled:
// the dashboard shows every lock with its lease id, profiles show internals.
func (s *Server) adminOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if pol := s.policies(); pol.On() && !pol.IsAdmin(principalFrom(r.Context())) {
			p := principalFrom(r.Context())
			s.auditLog().Warn("audit", "action", r.URL.Path, "principal", p.String(), "result", "denied")
			writeDenied(w, r, api.Errorf(api.CodePermissionDenied, "%s may not open %s (needs admin once auth is enabled)", p, r.URL.Path))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// limitsPrincipal is the per-principal limits' name of an authenticated
// caller ("user:NAME"), or "" for an anonymous one or a node.
func limitsPrincipal(r *http.Request) string {
	if p := principalFrom(r.Context()); p.Name != "" && !p.Node {
		return "user:" + p.Name
	}
	return ""
}

// setForwardHeaders marks a request this node forwards to the leader: by
// whom, the cluster, and the caller it acts for.
func (s *Server) setForwardHeaders(ctx context.Context, h http.Header) {
	h.Set(forwardedHeader, s.node.ID())
	h.Set(clusterIDHeader, s.node.ClusterID())
	p := principalFrom(ctx)
	switch {
	case p.Node:
		h.Set(principalHeader, nodeValue)
	case p.Name == "":
		h.Set(principalHeader, principal(ctx)) // the limits' name (admission.go)
	default:
		h.Set(principalHeader, p.Name)
	}
}

// authorize decides whether the caller may send msg to proc: nil or a
// permission-denied error, logged for audit.
func (s *Server) authorize(ctx context.Context, pol *auth.Policies, proc string, msg any) error {
	if err := s.decideAudited(ctx, pol, proc, msg); err != nil {
		return api.ToConnect(err)
	}
	return nil
}

// decideAudited is authorize with the error as an api error: the decision
// is auth.Decide's, against this node's sessions (sessionOwner).
func (s *Server) decideAudited(ctx context.Context, pol *auth.Policies, proc string, msg any) error {
	p := principalFrom(ctx)
	err := auth.Decide(pol, p, proc, msg, s.sessionOwner)
	if err != nil {
		err = deniedToAPI(err)
		s.auditLog().Warn("audit", "action", auth.Action(proc), "principal", p.String(), "result", "denied", "reason", api.FromError(err).Message)
	}
	return err
}

// sessionOwner is the auth.SessionOwner of this node's state.
func (s *Server) sessionOwner(leaseID string) (owner string, ok bool) {
	s.node.Read(func(m *fsm.Machine) { owner, ok = m.SessionPrincipal(leaseID) })
	return owner, ok
}

// deniedToAPI maps a refusal of package auth to permission-denied with
// its reason.
func deniedToAPI(err error) error {
	if reason, ok := auth.Reason(err); ok {
		return api.Errorf(api.CodePermissionDenied, "%s", reason)
	}
	return err
}

// checkPending decides, on the leader just before it runs a request
// locally, a request of a procedure the leader decides (auth.LeaderRule
// names its rule from the message), as the principal ctx carries: the
// caller's, the one a proven node forwarded for, or the node's own
// (asNode). The node that received it left it undecided
// (auth.DecidedAtLeader).
func (s *Server) checkPending(ctx context.Context, msg any) error {
	rule, ok := auth.LeaderRule(msg)
	if !ok {
		return nil
	}
	pol := s.policies()
	if !pol.On() {
		return nil
	}
	return s.authorize(ctx, pol, rule, msg)
}

// asNode is ctx acting as this node (the node role), for what the server
// does on its own behalf, such as withdrawing the wait of a caller that
// went away.
func asNode(ctx context.Context) context.Context {
	return context.WithValue(ctx, authPrincipalKey{}, authn{p: auth.Principal{Node: true}})
}

// authz is the connect interceptor of authorization.
type authz struct{ s *Server }

func (a authz) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		proc := req.Spec().Procedure
		pol, err := a.s.authorizeOp(ctx, proc, req.Any())
		if err != nil {
			return nil, err
		}
		res, err := next(ctx, req)
		var msg any
		if err == nil {
			msg = res.Any()
		}
		a.s.finishOp(ctx, pol, proc, msg, err)
		return res, err
	}
}

// authorizeOp decides one operation: a unary RPC, or one message of a
// LockStream (lockstream.go) as the unary procedure proc, unless the
// leader decides it (auth.DecidedAtLeader; checkPending). It returns the
// policies finishOp needs.
func (s *Server) authorizeOp(ctx context.Context, proc string, msg any) (*auth.Policies, error) {
	pol := s.policies()
	if !pol.On() || auth.DecidedAtLeader(proc) { // the plain path: one atomic load
		return pol, nil
	}
	return pol, s.authorize(ctx, pol, proc, msg)
}

// finishOp audits an administrative operation and redacts an answer
// (res, nil when the operation failed with err) for the caller.
func (s *Server) finishOp(ctx context.Context, pol *auth.Policies, proc string, res any, err error) {
	if auth.AdminProcedure(proc) {
		s.auditAdmin(ctx, proc, err)
	}
	if err == nil && pol.On() {
		s.redact(ctx, pol, res)
	}
}

func (a authz) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a authz) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		pol := a.s.policies()
		if !pol.On() {
			return next(ctx, conn)
		}
		if auth.DecidedAtLeader(conn.Spec().Procedure) {
			return next(ctx, conn) // each renewal is decided by the leader as a KeepAlive (checkPending)
		}
		if conn.Spec().Procedure == leaseholdv1connect.LeaseholdServiceLockStreamProcedure {
			return next(ctx, conn) // each message is authorized as its unary RPC (lockstream.go)
		}
		err := next(ctx, &authzConn{StreamingHandlerConn: conn, s: a.s, ctx: ctx, pol: pol})
		if auth.AdminProcedure(conn.Spec().Procedure) {
			a.s.auditAdmin(ctx, conn.Spec().Procedure, err)
		}
		return err
	}
}

// authzConn checks every received message and redacts every sent one.
type authzConn struct {
	connect.StreamingHandlerConn
	s   *Server
	ctx context.Context
	pol *auth.Policies
}

func (c *authzConn) Receive(msg any) error {
	if err := c.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	return c.s.authorize(c.ctx, c.pol, c.Spec().Procedure, msg)
}

func (c *authzConn) Send(msg any) error {
	c.s.redact(c.ctx, c.pol, msg)
	return c.StreamingHandlerConn.Send(msg)
}

func (s *Server) auditAdmin(ctx context.Context, proc string, err error) {
	p := principalFrom(ctx)
	if err != nil {
		s.auditLog().Info("audit", "action", auth.Action(proc), "principal", p.String(), "result", "error", "err", err.Error())
		return
	}
	s.auditLog().Info("audit", "action", auth.Action(proc), "principal", p.String(), "result", "ok")
}

// redact removes the lease ids of other principals' sessions from an
// answer for the caller of ctx (auth.Redact).
func (s *Server) redact(ctx context.Context, pol *auth.Policies, msg any) {
	auth.Redact(pol, principalFrom(ctx), msg, s.sessionOwner)
}
