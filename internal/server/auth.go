package server

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// Authentication and authorization at the API edge.
//
//	HTTP request ─► authenticate (middleware): mTLS CN, bearer token, or the
//	                forwarded principal header when a node of this cluster sends it
//	             ─► authz (connect interceptor): permission on the name, session ownership,
//	                lease ids redacted in answers; audit lines
//
// The policies are the replicated state (fsm auth.go) compiled by each node
// after every change (Server.pol), so a check never waits on Raft, and with
// auth disabled it is one atomic load and a branch.

// nodeSecretHeader carries Config.NodeSecret on calls between nodes.
const nodeSecretHeader = "Leasehold-Node-Secret"

// withNodeSecret makes hc send the node secret with every request. When
// hc is a TLS client (peerClient with a TLS config), a request that is not
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

// principalHeader (limits.go) carries the original caller when a node
// forwards a request: a principal's name, nodeValue for a node, or for an
// anonymous caller the limits' name of it ("ip:…", "token:…"). Names never
// contain ':' (certificate CNs and token principals are checked with
// auth.ValidPrincipal), so the forms do not mix. Only another node of the
// same cluster (a node certificate or the node secret) may send it.
const nodeValue = "node:"

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

// authenticate is the HTTP middleware that finds the caller.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fwd := r.Header.Get(principalHeader)
		bearer := r.Header.Get("Authorization")
		if fwd == "" && bearer == "" && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) && r.Header.Get(nodeSecretHeader) == "" {
			next.ServeHTTP(w, r) // anonymous: the zero Principal
			return
		}
		p, err := s.authenticateRequest(r.TLS, r.Header, fwd, bearer)
		if err != nil {
			s.auditLog().Warn("audit", "action", "authenticate", "path", r.URL.Path, "principal", p.String(), "result", "denied", "reason", err.Error())
			writeDenied(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), authPrincipalKey{}, authn{p: p, tls: r.TLS, header: r.Header})))
	})
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
	p, err := s.authenticateRequest(a.tls, a.header, a.header.Get(principalHeader), a.header.Get("Authorization"))
	if err != nil {
		s.auditLog().Warn("audit", "action", "authenticate", "path", path, "principal", p.String(), "result", "denied", "reason", err.Error())
		return ctx, err
	}
	return context.WithValue(ctx, authPrincipalKey{}, authn{p: p, tls: a.tls, header: a.header}), nil
}

func (s *Server) authenticateRequest(cs *tls.ConnectionState, h http.Header, fwd, bearer string) (auth.Principal, error) {
	var p auth.Principal
	pol := s.policies()
	if cs != nil && len(cs.VerifiedChains) > 0 && len(cs.VerifiedChains[0]) > 0 {
		c := cs.VerifiedChains[0][0]
		switch cn := c.Subject.CommonName; {
		case auth.IsNodeCert(c):
			p = auth.Principal{Name: auth.NodeName, Node: true}
		case auth.ValidPrincipal(cn):
			p = auth.Principal{Name: cn}
		case pol.On():
			return p, api.Errorf(api.CodePermissionDenied, "the client certificate's CN %q is not a principal name (1..64 of A-Z a-z 0-9 . _ - @, not node)", cn)
		}
	}
	if sec := h.Get(nodeSecretHeader); sec != "" {
		switch {
		case s.nodeCredential(nil, h):
			p = auth.Principal{Name: auth.NodeName, Node: true}
		case pol.On():
			return p, api.Errorf(api.CodePermissionDenied, "wrong %s: this node has another --node-secret-file", nodeSecretHeader)
		}
	}
	if fwd != "" {
		// Only a node of this cluster speaks for another caller; the
		// cluster id header is compared by clusterCheck.
		if !p.Node || h.Get(clusterIDHeader) != s.node.ClusterID() {
			if !pol.On() {
				return p, nil // nothing is decided by the principal: ignore it
			}
			return p, api.Errorf(api.CodePermissionDenied, "the %s header is accepted only from a node of this cluster (caller %s)", principalHeader, p)
		}
		switch {
		case fwd == nodeValue:
			return p, nil // a node's own request, forwarded by another node
		case strings.HasPrefix(fwd, "ip:") || strings.HasPrefix(fwd, "token:"):
			return auth.Anonymous, nil // the limits' name of an anonymous caller
		case !auth.ValidPrincipal(fwd):
			return p, api.Errorf(api.CodePermissionDenied, "the %s header names %q, not a principal", principalHeader, fwd)
		}
		return s.withAdmin(auth.Principal{Name: fwd}), nil
	}
	if tok, ok := strings.CutPrefix(bearer, "Bearer "); ok {
		name, err := pol.Authenticate(tok)
		if err != nil {
			if !pol.On() {
				return s.withAdmin(p), nil
			}
			return p, api.Errorf(api.CodePermissionDenied, "%v", err)
		}
		p = auth.Principal{Name: name}
	} else if bearer != "" && pol.On() {
		return p, api.Errorf(api.CodePermissionDenied, "the Authorization header must be \"Bearer <token>\"")
	}
	return s.withAdmin(p), nil
}

func (s *Server) withAdmin(p auth.Principal) auth.Principal {
	if p.Name != "" && !p.Node && slices.Contains(s.cfg.Admins, p.Name) {
		p.Admin = true
	}
	return p
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
		h.Set(principalHeader, principal(ctx)) // the limits' name (limits.go)
	default:
		h.Set(principalHeader, p.Name)
	}
}

// rule is what one procedure needs.
type rule struct {
	perm  auth.Perm
	scope scope
}

type scope uint8

const (
	scopeAny     scope = iota // the permission on some name
	scopeName                 // on the request's name (GetName)
	scopePrefix               // on the request's prefix (GetPrefix)
	scopeKey                  // on the request's key (GetKey)
	scopeCluster              // admin (nodes too)
	scopeOpen                 // anyone (auth status)
)

var rules = map[string]rule{
	leaseholdv1connect.LeaseholdServiceCreateSessionProcedure:   {auth.PermLock, scopeAny},
	leaseholdv1connect.LeaseholdServiceKeepAliveProcedure:       {auth.PermLock, scopeAny},
	leaseholdv1connect.LeaseholdServiceKeepAliveStreamProcedure: {auth.PermLock, scopeAny},
	leaseholdv1connect.LeaseholdServiceLockStreamProcedure:      {auth.PermLock, scopeAny}, // the stream; each request is decided as its RPC
	leaseholdv1connect.LeaseholdServiceCloseSessionProcedure:    {auth.PermLock, scopeAny},
	leaseholdv1connect.LeaseholdServiceAcquireProcedure:         {auth.PermLock, scopeName},
	leaseholdv1connect.LeaseholdServiceTryAcquireProcedure:      {auth.PermLock, scopeName},
	leaseholdv1connect.LeaseholdServiceReleaseProcedure:         {auth.PermLock, scopeName},
	leaseholdv1connect.LeaseholdServiceCancelWaitProcedure:      {auth.PermLock, scopeName},
	leaseholdv1connect.LeaseholdServiceProclaimProcedure:        {auth.PermLock, scopeName},
	leaseholdv1connect.LeaseholdServiceStatusProcedure:          {auth.PermRead, scopeName},
	leaseholdv1connect.LeaseholdServiceListProcedure:            {auth.PermRead, scopePrefix},
	leaseholdv1connect.LeaseholdServiceWatchProcedure:           {auth.PermRead, scopePrefix},
	leaseholdv1connect.LeaseholdServiceKvPutProcedure:           {auth.PermKVWrite, scopeKey},
	leaseholdv1connect.LeaseholdServiceKvDeleteProcedure:        {auth.PermKVWrite, scopeKey},
	leaseholdv1connect.LeaseholdServiceKvGetProcedure:           {auth.PermKVRead, scopeKey},
	leaseholdv1connect.AuthServiceStatusProcedure:               {0, scopeOpen},
}

// adminProcedure reports whether proc is an administrative action (a
// cluster or auth change), logged for audit (INFO) whatever its outcome and
// whether or not auth is enabled.
func adminProcedure(proc string) bool {
	return (strings.HasPrefix(proc, "/"+leaseholdv1connect.ClusterServiceName+"/") && proc != leaseholdv1connect.ClusterServiceMembersProcedure) ||
		(strings.HasPrefix(proc, "/"+leaseholdv1connect.AuthServiceName+"/") && proc != leaseholdv1connect.AuthServiceStatusProcedure && proc != leaseholdv1connect.AuthServiceListPoliciesProcedure && proc != leaseholdv1connect.AuthServiceListTokensProcedure)
}

func action(proc string) string {
	if i := strings.LastIndexByte(proc, '/'); i >= 0 {
		return proc[i+1:]
	}
	return proc
}

// authorize decides whether the caller may send msg to proc: nil or a
// permission-denied error, logged for audit.
func (s *Server) authorize(ctx context.Context, pol *auth.Policies, proc string, msg any) error {
	if err := s.decideAudited(ctx, pol, proc, msg); err != nil {
		return api.ToConnect(err)
	}
	return nil
}

// decideAudited is authorize with the error as an api error.
func (s *Server) decideAudited(ctx context.Context, pol *auth.Policies, proc string, msg any) error {
	p := principalFrom(ctx)
	err := decide(s, pol, p, proc, msg)
	if err != nil {
		s.auditLog().Warn("audit", "action", action(proc), "principal", p.String(), "result", "denied", "reason", api.FromError(err).Message)
	}
	return err
}

func decide(s *Server, pol *auth.Policies, p auth.Principal, proc string, msg any) error {
	r, ok := rules[proc]
	if !ok {
		r = rule{auth.PermAdmin, scopeCluster}
	}
	// A request this node forwards must be decided as its caller: a node
	// is trusted only for what it does itself.
	var allowed bool
	switch r.scope {
	case scopeOpen:
		allowed = true
	case scopeAny:
		allowed = pol.AllowAny(p, r.perm)
	case scopeName:
		n, _ := msg.(interface{ GetName() string })
		allowed = n != nil && pol.Allow(p, r.perm, n.GetName())
	case scopePrefix:
		n, _ := msg.(interface{ GetPrefix() string })
		allowed = n != nil && pol.Allow(p, r.perm, n.GetPrefix())
	case scopeKey:
		n, _ := msg.(interface{ GetKey() string })
		allowed = n != nil && pol.Allow(p, r.perm, n.GetKey())
	case scopeCluster:
		allowed = pol.IsAdmin(p)
	}
	if !allowed {
		return api.Errorf(api.CodePermissionDenied, "%s may not %s (needs %s)", p, action(proc), r.perm)
	}
	var ids []string
	if l, ok := msg.(interface{ GetLeaseId() string }); ok && l.GetLeaseId() != "" {
		ids = []string{l.GetLeaseId()}
	}
	if l, ok := msg.(interface{ GetLeaseIds() []string }); ok {
		ids = append(ids, l.GetLeaseIds()...) // a batched renewal
	}
	if len(ids) == 0 {
		return nil
	}
	return s.checkOwner(pol, p, ids)
}

// checkOwner refuses the use of another principal's sessions: a request
// naming several (a batched renewal) is refused whole. A session this node
// does not know yet (replication lag) passes: the leader decides.
func (s *Server) checkOwner(pol *auth.Policies, p auth.Principal, leaseIDs []string) error {
	if pol.IsAdmin(p) {
		return nil
	}
	foreign := ""
	s.node.Read(func(m *fsm.Machine) {
		for _, id := range leaseIDs {
			if owner, ok := m.SessionPrincipal(id); ok && owner != p.Name {
				foreign = id
				return
			}
		}
	})
	if foreign != "" {
		return api.Errorf(api.CodePermissionDenied, "session %s… belongs to another principal, not %s", foreign[:min(len(foreign), 6)], p)
	}
	return nil
}

// decidedAtLeader are the procedures a follower forwards to the leader:
// the leader decides them against its policies and state (onLeader,
// leaderCluster and leaderAuth call checkPending before running them
// locally), so that a follower that has not applied a policy change yet
// neither refuses nor allows in its place. The value is the rule to check:
// a KeepAliveStream's renewals are KeepAlives.
var decidedAtLeader = map[string]string{
	leaseholdv1connect.LeaseholdServiceCreateSessionProcedure:   leaseholdv1connect.LeaseholdServiceCreateSessionProcedure,
	leaseholdv1connect.LeaseholdServiceKeepAliveProcedure:       leaseholdv1connect.LeaseholdServiceKeepAliveProcedure,
	leaseholdv1connect.LeaseholdServiceKeepAliveStreamProcedure: leaseholdv1connect.LeaseholdServiceKeepAliveProcedure,
	leaseholdv1connect.LeaseholdServiceCloseSessionProcedure:    leaseholdv1connect.LeaseholdServiceCloseSessionProcedure,
	leaseholdv1connect.LeaseholdServiceAcquireProcedure:         leaseholdv1connect.LeaseholdServiceAcquireProcedure,
	leaseholdv1connect.LeaseholdServiceTryAcquireProcedure:      leaseholdv1connect.LeaseholdServiceTryAcquireProcedure,
	leaseholdv1connect.LeaseholdServiceReleaseProcedure:         leaseholdv1connect.LeaseholdServiceReleaseProcedure,
	leaseholdv1connect.LeaseholdServiceCancelWaitProcedure:      leaseholdv1connect.LeaseholdServiceCancelWaitProcedure,
	leaseholdv1connect.LeaseholdServiceProclaimProcedure:        leaseholdv1connect.LeaseholdServiceProclaimProcedure,
	leaseholdv1connect.LeaseholdServiceKvPutProcedure:           leaseholdv1connect.LeaseholdServiceKvPutProcedure,
	leaseholdv1connect.LeaseholdServiceKvDeleteProcedure:        leaseholdv1connect.LeaseholdServiceKvDeleteProcedure,
	leaseholdv1connect.ClusterServiceAddMemberProcedure:         leaseholdv1connect.ClusterServiceAddMemberProcedure,
	leaseholdv1connect.ClusterServiceRemoveMemberProcedure:      leaseholdv1connect.ClusterServiceRemoveMemberProcedure,
	leaseholdv1connect.ClusterServiceTransferLeaderProcedure:    leaseholdv1connect.ClusterServiceTransferLeaderProcedure,
	leaseholdv1connect.ClusterServiceBumpTokenProcedure:         leaseholdv1connect.ClusterServiceBumpTokenProcedure,
	leaseholdv1connect.AuthServiceSetEnabledProcedure:           leaseholdv1connect.AuthServiceSetEnabledProcedure,
	leaseholdv1connect.AuthServiceCreateTokenProcedure:          leaseholdv1connect.AuthServiceCreateTokenProcedure,
	leaseholdv1connect.AuthServiceRevokeTokenProcedure:          leaseholdv1connect.AuthServiceRevokeTokenProcedure,
	leaseholdv1connect.AuthServiceSetPolicyProcedure:            leaseholdv1connect.AuthServiceSetPolicyProcedure,
	leaseholdv1connect.AuthServiceDeletePolicyProcedure:         leaseholdv1connect.AuthServiceDeletePolicyProcedure,
}

type pendingKey struct{}

// checkPending decides, on the leader just before it runs a request
// locally, the request the interceptor left to it (decidedAtLeader).
func (s *Server) checkPending(ctx context.Context, msg any) error {
	proc, ok := ctx.Value(pendingKey{}).(string)
	if !ok {
		return nil
	}
	pol := s.policies()
	if !pol.On() {
		return nil
	}
	return s.authorize(ctx, pol, proc, msg)
}

// authz is the connect interceptor of authorization.
type authz struct{ s *Server }

func (a authz) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		proc := req.Spec().Procedure
		ctx, pol, err := a.s.authorizeOp(ctx, proc, req.Any())
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
// LockStream (lockstream.go) as the unary procedure proc. It returns the
// context to run it in (marked for the leader's decision where
// decidedAtLeader says so) and the policies finishOp needs.
func (s *Server) authorizeOp(ctx context.Context, proc string, msg any) (context.Context, *auth.Policies, error) {
	pol := s.policies()
	if !pol.On() { // the plain path: one atomic load
		return ctx, pol, nil
	}
	if rule, ok := decidedAtLeader[proc]; ok {
		return context.WithValue(ctx, pendingKey{}, rule), pol, nil
	}
	if err := s.authorize(ctx, pol, proc, msg); err != nil {
		return ctx, pol, err
	}
	return ctx, pol, nil
}

// finishOp audits an administrative operation and redacts an answer
// (res, nil when the operation failed with err) for the caller.
func (s *Server) finishOp(ctx context.Context, pol *auth.Policies, proc string, res any, err error) {
	if adminProcedure(proc) {
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
		if rule, ok := decidedAtLeader[conn.Spec().Procedure]; ok {
			return next(context.WithValue(ctx, pendingKey{}, rule), conn)
		}
		if conn.Spec().Procedure == leaseholdv1connect.LeaseholdServiceLockStreamProcedure {
			return next(ctx, conn) // each message is authorized as its unary RPC (lockstream.go)
		}
		err := next(ctx, &authzConn{StreamingHandlerConn: conn, s: a.s, ctx: ctx, pol: pol})
		if adminProcedure(conn.Spec().Procedure) {
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
		s.auditLog().Info("audit", "action", action(proc), "principal", p.String(), "result", "error", "err", err.Error())
		return
	}
	s.auditLog().Info("audit", "action", action(proc), "principal", p.String(), "result", "ok")
}

// redact removes the lease ids of other principals' sessions from an
// answer (status, list, watch): the holder's owner label and token stay.
func (s *Server) redact(ctx context.Context, pol *auth.Policies, msg any) {
	p := principalFrom(ctx)
	if pol.IsAdmin(p) {
		return
	}
	var infos []*pb.LockInfo
	switch m := msg.(type) {
	case *pb.StatusResponse:
		infos = []*pb.LockInfo{m.GetLock()}
	case *pb.ListResponse:
		infos = m.GetLocks()
	case *pb.ReleaseResponse:
		if n := m.GetNext(); n != nil && !s.owns(p, n.GetLeaseId()) {
			n.LeaseId = ""
		}
		return
	case *pb.WatchResponse:
		if e := m.GetEvent(); e != nil && e.GetLeaseId() != "" && !s.owns(p, e.GetLeaseId()) {
			e.LeaseId = ""
		}
		infos = m.GetCompacted().GetLocks()
	default:
		return
	}
	for _, li := range infos {
		if h := li.GetHolder(); h != nil && !s.owns(p, h.GetLeaseId()) {
			h.LeaseId = ""
		}
		for _, h := range li.GetHolders() { // shared holders and permits
			if !s.owns(p, h.GetLeaseId()) {
				h.LeaseId = ""
			}
		}
		for _, w := range li.GetWaiters() {
			if !s.owns(p, w.GetLeaseId()) {
				w.LeaseId = ""
			}
		}
	}
}

func (s *Server) owns(p auth.Principal, leaseID string) bool {
	var owner string
	var ok bool
	s.node.Read(func(m *fsm.Machine) { owner, ok = m.SessionPrincipal(leaseID) })
	return ok && owner == p.Name
}

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
// credential that nobody could mint while auth was off, as turning auth on
// and changing the auth state while it is off require: the node role (a
// node certificate or the node secret; a node forwarding a request made
// that check where it was received), or a principal named by serve --admin
// proven by its verified client certificate. A bearer token is not one:
// anyone may create tokens, for any principal, while auth is off.
func (s *Server) bootstrapCredential(ctx context.Context) bool {
	a, ok := ctx.Value(authPrincipalKey{}).(authn)
	if !ok {
		return false
	}
	if s.nodeCredential(a.tls, a.header) {
		return true
	}
	if a.tls == nil || len(a.tls.VerifiedChains) == 0 || len(a.tls.VerifiedChains[0]) == 0 || a.header.Get("Authorization") != "" {
		return false
	}
	cn := a.tls.VerifiedChains[0][0].Subject.CommonName
	return cn == a.p.Name && slices.Contains(s.cfg.Admins, cn)
}

// nodeCredential reports whether a request came with a node certificate
// or this cluster's node secret.
func (s *Server) nodeCredential(cs *tls.ConnectionState, h http.Header) bool {
	if cs != nil && len(cs.VerifiedChains) > 0 && len(cs.VerifiedChains[0]) > 0 && auth.IsNodeCert(cs.VerifiedChains[0][0]) {
		return true
	}
	sec := h.Get(nodeSecretHeader)
	return sec != "" && s.cfg.NodeSecret != "" && subtle.ConstantTimeCompare([]byte(sec), []byte(s.cfg.NodeSecret)) == 1
}

// needBootstrapCredential refuses what (enabling auth, or minting a token
// or a policy while auth is off) the caller may do only with
// bootstrapCredential.
func (s *Server) needBootstrapCredential(ctx context.Context, what string) error {
	if s.bootstrapCredential(ctx) {
		return nil
	}
	return api.ToConnect(api.Errorf(api.CodePermissionDenied, "%s needs the node role (a node certificate or the node secret) or a principal named by serve --admin proven by its client certificate, not %s: while auth is off anyone may mint a token", what, principalFrom(ctx)))
}

// needWhileOff is needBootstrapCredential while auth is off: with auth on,
// the policies decide (admin).
func (s *Server) needWhileOff(ctx context.Context, what string) error {
	if s.policies().On() {
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
	pol := a.s.policies()
	p := principalFrom(ctx)
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
	for _, t := range a.s.policies().Tokens() {
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
	for _, p := range a.s.policies().State().GetPolicies() {
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
