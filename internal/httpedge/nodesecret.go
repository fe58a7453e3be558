package httpedge

import (
	"net/http"

	"github.com/leasehold/leasehold/api"
)

// NodeSecretHeader carries the node secret on calls between nodes.
const NodeSecretHeader = "Leasehold-Node-Secret"

// WithNodeSecret makes hc send the node secret with every request. When
// hc is a TLS client (PeerClient with a TLS config), a request that is not
// https:// fails before anything is sent: the secret makes its bearer a
// node, so it never travels in clear from a node that speaks TLS.
func WithNodeSecret(hc *http.Client, secret string) *http.Client {
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
	r.Header.Set(NodeSecretHeader, t.secret)
	return t.rt.RoundTrip(r)
}

func (t nodeSecretTransport) CloseIdleConnections() {
	if c, ok := t.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
