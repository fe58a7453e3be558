package auth

import (
	"crypto/subtle"
	"crypto/tls"
	"slices"
	"strings"
)

// The headers a request's credentials travel in, as Credentials holds them.
const (
	// NodeSecretHeader carries the cluster's node secret on calls between
	// nodes.
	NodeSecretHeader = "Leasehold-Node-Secret"
	// PrincipalHeader names the original caller when a node forwards a
	// request.
	PrincipalHeader = "Leasehold-Principal"
	// ForwardedNode is PrincipalHeader's value for a node's own request.
	ForwardedNode = "node:"
)

// Credentials are what one request presents: its connection's TLS state
// and the values of the headers that name a caller ("" when absent).
type Credentials struct {
	TLS        *tls.ConnectionState
	Forwarded  string // PrincipalHeader
	Bearer     string // Authorization
	NodeSecret string // NodeSecretHeader
	ClusterID  string // the cluster id header of a forwarded request
}

// None reports whether c presents no credential at all: the caller is
// anonymous without a decision.
func (c Credentials) None() bool {
	return c.Forwarded == "" && c.Bearer == "" && (c.TLS == nil || len(c.TLS.VerifiedChains) == 0) && c.NodeSecret == ""
}

// Authenticator maps a request's credentials to one Principal. Its fields
// are read only; it is safe for concurrent use.
type Authenticator struct {
	// NodeSecret is the cluster's node secret ("" for none).
	NodeSecret string
	// Admins are the principal names with the admin role (serve --admin).
	Admins []string
	// ClusterID returns this cluster's id, which a forwarding node sends.
	ClusterID func() string
	// Policies returns the compiled auth state (nil: disabled).
	Policies func() *Policies
}

// Authenticate finds the caller of a request, in this order: a verified
// client certificate (a node certificate, or a CN that is a principal
// name), the node secret, the forwarded principal (believed only from a
// node of this cluster), a bearer token; then the admin role. With auth
// enabled a credential that does not hold is refused (a *DeniedError);
// with auth disabled it is ignored. The principal found so far is
// returned with the error, for the audit line.
func (a *Authenticator) Authenticate(c Credentials) (Principal, error) {
	var p Principal
	pol := a.Policies()
	if cs := c.TLS; cs != nil && len(cs.VerifiedChains) > 0 && len(cs.VerifiedChains[0]) > 0 {
		cert := cs.VerifiedChains[0][0]
		switch cn := cert.Subject.CommonName; {
		case IsNodeCert(cert):
			p = Principal{Name: NodeName, Node: true}
		case ValidPrincipal(cn):
			p = Principal{Name: cn}
		case pol.On():
			return p, denied("the client certificate's CN %q is not a principal name (1..64 of A-Z a-z 0-9 . _ - @, not node)", cn)
		}
	}
	if c.NodeSecret != "" {
		switch {
		case a.NodeCredential(nil, c.NodeSecret):
			p = Principal{Name: NodeName, Node: true}
		case pol.On():
			return p, denied("wrong %s: this node has another --node-secret-file", NodeSecretHeader)
		}
	}
	if fwd := c.Forwarded; fwd != "" {
		// Only a node of this cluster speaks for another caller.
		if !p.Node || c.ClusterID != a.ClusterID() {
			if !pol.On() {
				return p, nil // nothing is decided by the principal: ignore it
			}
			return p, denied("the %s header is accepted only from a node of this cluster (caller %s)", PrincipalHeader, p)
		}
		switch {
		case fwd == ForwardedNode:
			return p, nil // a node's own request, forwarded by another node
		case strings.HasPrefix(fwd, "ip:") || strings.HasPrefix(fwd, "token:"):
			return Anonymous, nil // the limits' name of an anonymous caller
		case !ValidPrincipal(fwd):
			return p, denied("the %s header names %q, not a principal", PrincipalHeader, fwd)
		}
		return a.WithAdmin(Principal{Name: fwd}), nil
	}
	if tok, ok := strings.CutPrefix(c.Bearer, "Bearer "); ok {
		name, err := pol.Authenticate(tok)
		if err != nil {
			if !pol.On() {
				return a.WithAdmin(p), nil
			}
			return p, denied("%v", err)
		}
		p = Principal{Name: name}
	} else if c.Bearer != "" && pol.On() {
		return p, denied("the Authorization header must be \"Bearer <token>\"")
	}
	return a.WithAdmin(p), nil
}

// NodeCredential reports whether a request came with a node certificate
// (cs) or this cluster's node secret (secret, compared in constant time).
func (a *Authenticator) NodeCredential(cs *tls.ConnectionState, secret string) bool {
	if cs != nil && len(cs.VerifiedChains) > 0 && len(cs.VerifiedChains[0]) > 0 && IsNodeCert(cs.VerifiedChains[0][0]) {
		return true
	}
	return secret != "" && a.NodeSecret != "" && subtle.ConstantTimeCompare([]byte(secret), []byte(a.NodeSecret)) == 1
}

// WithAdmin gives p the admin role when Admins names it.
func (a *Authenticator) WithAdmin(p Principal) Principal {
	if p.Name != "" && !p.Node && slices.Contains(a.Admins, p.Name) {
		p.Admin = true
	}
	return p
}

// BootstrapCredential reports whether c, which authenticated to p, proves
// a credential that nobody could mint while auth was off, as turning auth
// on and changing the auth state while it is off require: the node role (a
// node certificate or the node secret; a node forwarding a request made
// that check where it was received), or a principal named by Admins proven
// by its verified client certificate. A bearer token is not one: anyone
// may create tokens, for any principal, while auth is off.
func (a *Authenticator) BootstrapCredential(p Principal, c Credentials) bool {
	if a.NodeCredential(c.TLS, c.NodeSecret) {
		return true
	}
	cs := c.TLS
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 || c.Bearer != "" {
		return false
	}
	cn := cs.VerifiedChains[0][0].Subject.CommonName
	return cn == p.Name && slices.Contains(a.Admins, cn)
}
