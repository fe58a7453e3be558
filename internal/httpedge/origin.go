package httpedge

import (
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/leasehold/leasehold/api"
)

// With auth off every caller may do everything, which is meant for the
// one user of a machine. A web page in that user's browser is another
// caller: it can send requests to 127.0.0.1 too, directly (cross-origin)
// or through a name of its own that it points at 127.0.0.1 (DNS
// rebinding). BrowserCheck refuses both while auth is off:
//
//   - a request with an Origin header (every browser request that could
//     change anything has one) whose host is not the request's Host: the
//     dashboard (/ui, same origin) passes, a page of another site does not;
//     CLI and program clients send no Origin;
//   - from a browser (a request with an Origin or a Sec-Fetch-Site
//     header, which browsers add and programs do not) on a connection to a
//     loopback address, a Host that is not an IP address, "localhost" (or a
//     name under .localhost) or the host of BrowserCheckConfig.APIAddr: a
//     rebinding page's requests carry its own name. Programs may use any
//     name (a node joining through a Service name, a CLI through an alias).
//
// Both are permission-denied (403). With auth on, requests need
// credentials a page cannot present, and these checks are off.

// BrowserCheckConfig is what BrowserCheck needs of the node.
type BrowserCheckConfig struct {
	// AuthOn reports whether auth is enabled; it is called for every
	// request, and the checks apply only while it is false.
	AuthOn func() bool
	// APIAddr is the host:port other nodes use to reach this node's API
	// (serve --advertise): its host is a name of this node.
	APIAddr string
	// Audit gets one WARN line for every refused request.
	Audit *slog.Logger
	// Deny answers a refused request with err (permission-denied), in the
	// protocol the request spoke.
	Deny func(w http.ResponseWriter, r *http.Request, err error)
}

// BrowserCheck refuses, while auth is off, the requests of a web page of
// another site (see above) and passes every other request to next.
func BrowserCheck(cfg BrowserCheckConfig, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !cfg.AuthOn() {
			if err := cfg.checkBrowser(r); err != nil {
				cfg.Audit.Warn("audit", "action", "browser-check", "path", r.URL.Path, "origin", r.Header.Get("Origin"), "host", r.Host, "result", "denied")
				cfg.Deny(w, r, err)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (cfg BrowserCheckConfig) checkBrowser(r *http.Request) error {
	if o := r.Header.Get("Origin"); o != "" {
		if u, err := url.Parse(o); err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
			return api.Errorf(api.CodePermissionDenied, "a request from the web page of %q to %q: with auth off this API answers only its own pages (/ui) and clients that send no Origin", o, r.Host)
		}
	}
	if fromBrowser(r) && !cfg.loopbackHost(r.Host) && onLoopback(r) {
		return api.Errorf(api.CodePermissionDenied, "Host %q: with auth off this loopback API answers only an IP address, localhost or the host of its API address (%s, serve --advertise)", r.Host, cfg.APIAddr)
	}
	return nil
}

// fromBrowser reports whether r carries the headers a browser adds to
// every request it sends for a page (Fetch Metadata, or an Origin).
func fromBrowser(r *http.Request) bool {
	return r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") != ""
}

// onLoopback reports whether r came on a connection to a loopback address.
func onLoopback(r *http.Request) bool {
	la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	ap, err := netip.ParseAddrPort(la.String())
	return err == nil && ap.Addr().IsLoopback()
}

// loopbackHost reports whether a request's Host names this node in a way a
// page of another site cannot: an IP address, localhost, or APIAddr's host.
func (cfg BrowserCheckConfig) loopbackHost(hostport string) bool {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.Trim(h, "[]"), ".")
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	if strings.EqualFold(h, "localhost") || strings.HasSuffix(strings.ToLower(h), ".localhost") {
		return true
	}
	own, _, err := net.SplitHostPort(cfg.APIAddr)
	return err == nil && strings.EqualFold(h, own)
}
