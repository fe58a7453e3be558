package httpedge

import (
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"time"
)

// TLS on the API port.
//
// With a TLS configuration, Serve speaks only TLS: HTTP/2 (negotiated by ALPN, what gRPC needs)
// and HTTP/1.1 (Connect/JSON, /metrics, /healthz) on the one port; a plaintext client gets a TLS
// handshake failure. With ClientAuth set to require a verified certificate, every caller
// (including other nodes) presents one signed by ClientCAs.
//
// Calls a node makes to other nodes' APIs (forwarding to the leader, joining, listing members,
// promoting a non-voter, the dashboard) use https:// and the peer client TLS configuration when
// it is set, and cleartext HTTP/2 otherwise (PeerClient, PeerBaseURL).
// In a TLS cluster every node's certificate must name the address it advertises (--advertise,
// or the listen address) so that the others can verify it.

// Serve serves hs on ln, over TLS when conf is set (the API port's
// configuration; APITLSConfig adds the protocols), logging TLS errors to l
// at WARN. ln hands over connections whose handshake is done (a listener
// of admission.Listen); offering "h2" in TLSConfig makes Serve set up HTTP/2.
func Serve(hs *http.Server, ln net.Listener, conf *tls.Config, l *slog.Logger) error {
	if conf == nil {
		return hs.Serve(ln)
	}
	hs.TLSConfig = APITLSConfig(conf)
	hs.ErrorLog = slog.NewLogLogger(l.Handler(), slog.LevelWarn)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	hs.Protocols = &p
	return hs.Serve(ln)
}

// APITLSConfig is the TLS configuration of the API port: a clone of conf
// offering HTTP/2 and HTTP/1.1 by ALPN.
func APITLSConfig(conf *tls.Config) *tls.Config {
	conf = conf.Clone()
	conf.NextProtos = slices.Clone(conf.NextProtos)
	for _, p := range []string{"h2", "http/1.1"} {
		if !slices.Contains(conf.NextProtos, p) {
			conf.NextProtos = append(conf.NextProtos, p)
		}
	}
	return conf
}

// PeerClient returns the HTTP client for calls to other nodes: HTTP/2 over TLS with cfg, or
// cleartext HTTP/2 with prior knowledge when cfg is nil.
func PeerClient(cfg *tls.Config) *http.Client {
	if cfg == nil {
		return h2cClient()
	}
	var p http.Protocols
	p.SetHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p, TLSClientConfig: cfg.Clone(), MaxIdleConnsPerHost: 8, TLSHandshakeTimeout: PeerHandshakeTimeout}}
}

// PeerHandshakeTimeout bounds a TLS handshake with another node. A node
// whose port is bound but not served yet (it is joining) or whose process
// is paused accepts the TCP connection in the kernel and never answers;
// the call then fails as not sent (api.NotSent) and is retried, instead of
// waiting out its caller's deadline.
const PeerHandshakeTimeout = 3 * time.Second

// PeerBaseURL is the base URL of a node's API at addr (host:port) for a
// client with the TLS config conf (nil: cleartext).
func PeerBaseURL(conf *tls.Config, addr string) string {
	if conf != nil {
		return "https://" + addr
	}
	return "http://" + addr
}

func h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p, MaxIdleConnsPerHost: 8}}
}
