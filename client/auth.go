package client

import (
	"net/http"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
)

// WithBearerToken authenticates every call with tok (from `leasehold auth
// token create`), sent as "Authorization: Bearer tok". With auth enabled on
// the server, the token's principal is the caller: its policies decide
// what it may do, and the sessions it creates belong to it. Use TLS
// (WithTLS) on untrusted networks: the token is a password.
func WithBearerToken(tok string) DialOption {
	return func(o *dialOptions) { o.bearer = tok }
}

// withBearer adds the Authorization header to every request when a token
// is configured.
func (o dialOptions) withBearer(rt http.RoundTripper) http.RoundTripper {
	if o.bearer == "" {
		return rt
	}
	return bearerTransport{rt: rt, value: "Bearer " + o.bearer}
}

type bearerTransport struct {
	rt    http.RoundTripper
	value string
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", b.value)
	return b.rt.RoundTrip(r)
}

// CloseIdleConnections passes through, so that Client.Close closes them.
func (b bearerTransport) CloseIdleConnections() {
	if c, ok := b.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// AuthService returns a client of the auth administration service
// (policies, tokens, the enable switch) at the client's current endpoint;
// a follower forwards its writes to the leader.
func (c *Client) AuthService() (leaseholdv1connect.AuthServiceClient, error) {
	c.mu.Lock()
	ep := c.eps[c.cur]
	c.mu.Unlock()
	base, err := c.opts.baseURL(ep.addr)
	if err != nil {
		return nil, err
	}
	return leaseholdv1connect.NewAuthServiceClient(c.httpc, base, connect.WithGRPC()), nil
}
