package authedge

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/httpedge"
)

const (
	// nodeSecretHeader carries the node secret on calls between nodes
	// (httpedge.WithNodeSecret sends it).
	nodeSecretHeader = httpedge.NodeSecretHeader
	// forwardedHeader marks a request a node forwarded to the leader: by
	// whom.
	forwardedHeader = httpedge.ForwardedHeader
	// clusterIDHeader carries the sender's cluster id.
	clusterIDHeader = "Leasehold-Cluster-Id"
	// principalHeader carries the original caller when a node forwards a
	// request: a principal's name, nodeValue for a node, or for an
	// anonymous caller the limits' name of it ("ip:…", "token:…"). Names
	// never contain ':' (certificate CNs and token principals are checked
	// with auth.ValidPrincipal), so the forms do not mix. Only another node
	// of the same cluster (a node certificate or the node secret) may send
	// it.
	principalHeader = "Leasehold-Principal"
	nodeValue       = auth.ForwardedNode
)

type authPrincipalKey struct{}

// authn is what the middleware stores for an authenticated caller: the
// principal, and the connection's TLS state a LockStream needs to
// authenticate its messages again (Reauthenticate).
type authn struct {
	p      auth.Principal
	tls    *tls.ConnectionState
	header http.Header // the request's headers, to authenticate it again
}

// Principal returns the caller authenticated by the middleware
// (Edge.Authenticate); the zero Principal is anonymous.
func Principal(ctx context.Context) auth.Principal {
	a, _ := ctx.Value(authPrincipalKey{}).(authn)
	return a.p
}

// AsNode is ctx acting as this node (the node role), for what the server
// does on its own behalf, such as withdrawing the wait of a caller that
// went away.
func AsNode(ctx context.Context) context.Context {
	return context.WithValue(ctx, authPrincipalKey{}, authn{p: auth.Principal{Node: true}})
}

// Authenticate is the HTTP middleware that finds the caller
// (auth.Authenticator.Authenticate) and keeps it in the request's context
// (Principal).
func (e *Edge) Authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := credentials(r.TLS, r.Header)
		if c.None() {
			next.ServeHTTP(w, r) // anonymous: the zero Principal
			return
		}
		p, err := e.authr.Authenticate(c)
		if err != nil {
			err = deniedToAPI(err)
			e.cfg.Audit.Warn("audit", "action", "authenticate", "path", r.URL.Path, "principal", p.String(), "result", "denied", "reason", err.Error())
			WriteDenied(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), authPrincipalKey{}, authn{p: p, tls: r.TLS, header: r.Header})))
	})
}

// NodeCredential reports whether a request came with a node certificate
// or this cluster's node secret (auth.Authenticator.NodeCredential).
func (e *Edge) NodeCredential(cs *tls.ConnectionState, h http.Header) bool {
	return e.authr.NodeCredential(cs, h.Get(nodeSecretHeader))
}

// BootstrapCredential reports whether the caller of ctx proved a
// credential that nobody could mint while auth was off
// (auth.Authenticator.BootstrapCredential).
func (e *Edge) BootstrapCredential(ctx context.Context) bool {
	a, ok := ctx.Value(authPrincipalKey{}).(authn)
	return ok && e.authr.BootstrapCredential(a.p, credentials(a.tls, a.header))
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

// Reauthenticate authenticates the caller of a long-lived request again
// from its headers and connection, as Authenticate did when it began, so
// that a token revoked since is refused: ctx carries the new principal.
// An anonymous caller stays anonymous (decided by the policies).
func (e *Edge) Reauthenticate(ctx context.Context, path string) (context.Context, error) {
	a, ok := ctx.Value(authPrincipalKey{}).(authn)
	if !ok {
		return ctx, nil
	}
	p, err := e.authr.Authenticate(credentials(a.tls, a.header))
	if err != nil {
		err = deniedToAPI(err)
		e.cfg.Audit.Warn("audit", "action", "authenticate", "path", path, "principal", p.String(), "result", "denied", "reason", err.Error())
		return ctx, err
	}
	return context.WithValue(ctx, authPrincipalKey{}, authn{p: p, tls: a.tls, header: a.header}), nil
}

// WriteDenied answers a request refused before it reached its handler, in
// the protocol it spoke.
func WriteDenied(w http.ResponseWriter, r *http.Request, err error) {
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

// AdminOnly lets only admins (and nodes) reach next once auth is enabled:
// the dashboard shows every lock with its lease id, profiles show internals.
func (e *Edge) AdminOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if pol := e.Policies(); pol.On() && !pol.IsAdmin(Principal(r.Context())) {
			p := Principal(r.Context())
			e.cfg.Audit.Warn("audit", "action", r.URL.Path, "principal", p.String(), "result", "denied")
			WriteDenied(w, r, api.Errorf(api.CodePermissionDenied, "%s may not open %s (needs admin once auth is enabled)", p, r.URL.Path))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// LimitsPrincipal is the per-principal limits' name of an authenticated
// caller ("user:NAME"), or "" for an anonymous one or a node.
func LimitsPrincipal(r *http.Request) string {
	if p := Principal(r.Context()); p.Name != "" && !p.Node {
		return "user:" + p.Name
	}
	return ""
}

// SetForwardHeaders marks a request this node forwards to the leader: by
// whom, the cluster, and the caller it acts for.
func (e *Edge) SetForwardHeaders(ctx context.Context, h http.Header) {
	h.Set(forwardedHeader, e.cfg.NodeID())
	h.Set(clusterIDHeader, e.cfg.ClusterID())
	p := Principal(ctx)
	switch {
	case p.Node:
		h.Set(principalHeader, nodeValue)
	case p.Name == "":
		h.Set(principalHeader, e.cfg.LimitsName(ctx)) // the limits' name
	default:
		h.Set(principalHeader, p.Name)
	}
}
