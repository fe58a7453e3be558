package server

import (
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// TLS on the API port.
//
// With Config.TLS set, Serve speaks only TLS: HTTP/2 (negotiated by ALPN, what gRPC needs) and
// HTTP/1.1 (Connect/JSON, /metrics, /healthz) on the one port; a plaintext client gets a TLS
// handshake failure. With Config.TLS.ClientAuth set to require a verified certificate, every
// caller (including other nodes) presents one signed by Config.TLS.ClientCAs.
//
// Calls this node makes to other nodes' APIs (forwarding to the leader, joining, listing
// members, promoting a non-voter, the dashboard) use https:// and Config.PeerClientTLS when it
// is set, and cleartext HTTP/2 otherwise; the node secret is never sent on a cleartext
// connection by a node that has a Config.PeerClientTLS (withNodeSecret).
// In a TLS cluster every node's certificate must name the address it advertises (--advertise,
// or the listen address) so that the others can verify it.

// serveOn serves hs on ln, over TLS when the server is configured for it.
func (s *Server) serveOn(hs *http.Server, ln net.Listener) error {
	if s.cfg.TLS == nil {
		return hs.Serve(ln)
	}
	// ln hands over connections whose handshake is done (limited,
	// admission/connlimit.go); TLSConfig offering "h2" makes Serve set up HTTP/2.
	hs.TLSConfig = s.apiTLSConfig()
	hs.ErrorLog = slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelWarn)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	hs.Protocols = &p
	return hs.Serve(ln)
}

// peerClient returns the HTTP client for calls to other nodes: HTTP/2 over TLS with cfg, or
// cleartext HTTP/2 with prior knowledge when cfg is nil.
func peerClient(cfg *tls.Config) *http.Client {
	if cfg == nil {
		return h2cClient()
	}
	var p http.Protocols
	p.SetHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p, TLSClientConfig: cfg.Clone(), MaxIdleConnsPerHost: 8, TLSHandshakeTimeout: peerHandshakeTimeout}}
}

// peerHandshakeTimeout bounds a TLS handshake with another node. A node
// whose port is bound but not served yet (it is joining) or whose process
// is paused accepts the TCP connection in the kernel and never answers;
// the call then fails as not sent (api.NotSent) and is retried, instead of
// waiting out its caller's deadline.
const peerHandshakeTimeout = 3 * time.Second

// peerURL returns the base URL of another node's API at addr (host:port).
func (s *Server) peerURL(addr string) string { return peerBaseURL(s.cfg.PeerClientTLS, addr) }

// peerBaseURL is the base URL of a node's API at addr for a client with
// the TLS config conf (nil: cleartext).
func peerBaseURL(conf *tls.Config, addr string) string {
	if conf != nil {
		return "https://" + addr
	}
	return "http://" + addr
}
