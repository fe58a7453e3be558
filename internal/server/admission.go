package server

// The glue between the server and internal/admission: the principal the
// per-principal limits count a request under, the API listener's
// connection limits, and the live sessions the session count asks about.

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"

	"github.com/leasehold/leasehold/internal/admission"
	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/authedge"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/httpedge"
)

// principalOf names who sent r, for the per-principal limits: an
// authenticated principal's name (a verified client certificate, a valid
// bearer token, or the caller a node forwarded for; see internal/authedge), else its
// remote IP. A request a follower forwarded carries the principal the
// follower saw; fromNode says whether r's sender may speak for another
// caller (Server.mayForward).
//
// An Authorization header that did not authenticate (with auth off any
// bearer token is let through) does not name a principal: a client that
// sent a new header with every request would otherwise be a new principal
// each time, and escape every per-principal limit. For the same reason a
// Leasehold-Principal header is believed only from a node.
func principalOf(r *http.Request, fromNode func(*http.Request) bool) string {
	if p := authedge.LimitsPrincipal(r); p != "" {
		return p // authenticated (authedge)
	}
	if r.Header.Get(forwardedHeader) != "" && fromNode(r) {
		if p := r.Header.Get(principalHeader); p != "" {
			return p
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "ip:" + host
}

// mayForward reports whether r may name the principal it acts for
// (principalHeader): it comes from a node of this cluster (a node
// certificate or the node secret, and this cluster's id), or this node
// has no way to tell a node from a client (no node secret and no client
// certificates), so that any caller is believed, as in a cluster run
// without them. With auth on, Edge.Authenticate refuses the header from
// anyone else before the limits see it.
func (s *Server) mayForward(r *http.Request) bool {
	if s.cfg.NodeSecret == "" && (s.cfg.TLS == nil || s.cfg.TLS.ClientCAs == nil) {
		return true
	}
	return s.edge.NodeCredential(r.TLS, r.Header) && r.Header.Get(clusterIDHeader) == s.node.ClusterID()
}

// principalHeader carries the caller's principal on a forwarded request.
const principalHeader = "Leasehold-Principal"

// principal returns the principal the limits count the caller in ctx
// under (admission.Principal).
func principal(ctx context.Context) string { return admission.Principal(ctx) }

// limited applies the connection limits to hs and ln (admission.Listen):
// with TLS the listener completes each handshake before hs sees it.
func (s *Server) limited(hs *http.Server, ln net.Listener) (*http.Server, net.Listener) {
	var conf *tls.Config
	if s.cfg.TLS != nil {
		conf = httpedge.APITLSConfig(s.cfg.TLS)
	}
	return s.lim.Listen(hs, ln, conf, auth.IsNodeCert, s.cfg.Logger)
}

// endedSessions returns those of ids that are not live sessions.
func (s *Server) endedSessions(ids []string) []string {
	var out []string
	s.node.Read(func(m *fsm.Machine) {
		for _, id := range ids {
			if m.Session(id) == nil {
				out = append(out, id)
			}
		}
	})
	return out
}
