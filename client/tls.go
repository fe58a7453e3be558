package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/api"
)

// WithTLS makes the client speak TLS to every endpoint with cfg (its RootCAs verify the
// servers; its Certificates are the client certificate a server with mutual TLS requires).
// Endpoints without a scheme then mean https://, and an http:// endpoint is refused. Without
// WithTLS, https:// endpoints use the system's roots and no client certificate.
func WithTLS(cfg *tls.Config) DialOption {
	return func(o *dialOptions) { o.tls = cfg }
}

// newHTTPClient returns the HTTP client of Dial: HTTP/2 over TLS for https:// endpoints and
// cleartext HTTP/2 with prior knowledge for http:// ones.
func newHTTPClient(o dialOptions) *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	p.SetHTTP2(true)
	t := &http.Transport{Protocols: &p, MaxIdleConnsPerHost: 16, HTTP2: &http.HTTP2Config{
		SendPingTimeout: o.checkIdle, // WithConnectionCheck
		PingTimeout:     o.checkTimeout,
	}}
	if o.tls != nil {
		t.TLSClientConfig = o.tls.Clone()
	}
	return &http.Client{Transport: o.withCredentials(t)}
}

// baseURL returns the URL of endpoint ep: ep itself when it has a scheme, else https://ep
// with WithTLS and http://ep without. An http:// endpoint with WithTLS, or a client
// certificate outside its validity, is invalid-argument.
func (o dialOptions) baseURL(ep string) (string, error) {
	if err := o.checkClientCert(time.Now()); err != nil {
		return "", err
	}
	if o.tls != nil && strings.HasPrefix(ep, "http://") {
		return "", &api.Error{Code: api.CodeInvalidArgument, Message: "client: endpoint " + ep + " is http:// but TLS is configured; use https://"}
	}
	base := ep
	switch {
	case strings.Contains(ep, "://"):
	case o.tls != nil:
		base = "https://" + ep
	default:
		base = "http://" + ep
	}
	if o.nodeSecret != "" && !strings.HasPrefix(base, "https://") {
		if u, err := url.Parse(base); err != nil || !loopbackHost(u.Hostname()) {
			return "", &api.Error{Code: api.CodeInvalidArgument, Message: "client: refusing to send the node secret to " + ep + " in clear: use TLS (https:// or WithTLS), or a loopback address"}
		}
	}
	return base, nil
}

// checkClientCert refuses a client certificate that has expired or is not valid yet: a
// server would refuse it too, and with TLS 1.3 the client could not learn why.
func (o dialOptions) checkClientCert(now time.Time) error {
	if o.tls == nil {
		return nil
	}
	for _, c := range o.tls.Certificates {
		leaf := c.Leaf
		if leaf == nil && len(c.Certificate) > 0 {
			leaf, _ = x509.ParseCertificate(c.Certificate[0])
		}
		if leaf == nil {
			continue
		}
		if now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
			return &api.Error{Code: api.CodeInvalidArgument, Message: fmt.Sprintf(
				"client: the client certificate %q is valid from %s to %s, not now", leaf.Subject.CommonName,
				leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339))}
		}
	}
	return nil
}

// dialHint adds the likely cause to a call over TLS whose connection broke without an
// answer: a TLS server refusing the client certificate (which TLS 1.3 may report only as a
// closed connection).
func (o dialOptions) dialHint(e *api.Error, cause error) *api.Error {
	if api.IsServerError(cause) || api.Refused(cause) ||
		(e.Code != api.CodeOutcomeUnknown && e.Code != api.CodeUnavailable) {
		return e
	}
	var hint string
	switch {
	case o.tls == nil:
		return e // a TLS port is found by a probe instead (misconfigured)
	case len(o.tls.Certificates) > 0:
		hint = " (the server closed the connection during TLS setup: it may have refused the " +
			"client certificate as not signed by its --client-ca)"
	default:
		hint = " (the server closed the connection during TLS setup: it may require a client " +
			"certificate; give one in the tls.Config, CLI: --cert and --key)"
	}
	if !lostConn(cause) {
		return e
	}
	out := *e
	out.Message += hint
	return &out
}

// lostConn reports whether err is a connection the server closed or reset
// before answering.
func lostConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "connection reset") ||
		strings.Contains(err.Error(), "could not be established")
}
