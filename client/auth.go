package client

import (
	"net"
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

// WithNodeSecret sends the cluster's node secret (the file given to
// `serve --node-secret-file`) on every call, in the Leasehold-Node-Secret
// header: the caller has the node role, which may do anything, and while
// auth is off it is one of the two credentials (with an --admin client
// certificate) that may mint tokens and policies and run `auth enable`.
// Use it to bootstrap a cluster without client certificates, not for
// everyday calls. The secret is sent only over TLS or to a loopback
// address: Dial refuses a cleartext endpoint elsewhere with
// invalid-argument.
func WithNodeSecret(secret string) DialOption {
	return func(o *dialOptions) { o.nodeSecret = secret }
}

// nodeSecretHeader carries the node secret (WithNodeSecret).
const nodeSecretHeader = "Leasehold-Node-Secret"

// withCredentials adds the Authorization and node secret headers to every
// request when they are configured.
func (o dialOptions) withCredentials(rt http.RoundTripper) http.RoundTripper {
	if o.bearer == "" && o.nodeSecret == "" {
		return rt
	}
	t := credentialTransport{rt: rt, nodeSecret: o.nodeSecret}
	if o.bearer != "" {
		t.authorization = "Bearer " + o.bearer
	}
	return t
}

type credentialTransport struct {
	rt                        http.RoundTripper
	authorization, nodeSecret string
}

func (c credentialTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if c.authorization != "" {
		r.Header.Set("Authorization", c.authorization)
	}
	if c.nodeSecret != "" {
		r.Header.Set(nodeSecretHeader, c.nodeSecret)
	}
	return c.rt.RoundTrip(r)
}

// loopbackHost reports whether host (a URL's host name) is this machine.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CloseIdleConnections passes through, so that Client.Close closes them.
func (c credentialTransport) CloseIdleConnections() {
	if rt, ok := c.rt.(interface{ CloseIdleConnections() }); ok {
		rt.CloseIdleConnections()
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
