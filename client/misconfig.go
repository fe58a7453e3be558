package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"time"

	"github.com/leasehold/leasehold/api"
)

// probeTimeout bounds the TLS probe of an endpoint that closed a
// plaintext connection without an answer (misconfigured).
const probeTimeout = 500 * time.Millisecond

// misconfigured names, as a hint, a failure that no retry can fix: the
// endpoint cannot be reached with these settings (an untrusted server
// certificate, a TLS client at a plaintext port or the reverse, a client
// certificate missing or refused, a port that does not speak leasehold's
// API). No request reached a leasehold handler in any of these cases, so
// the call fails at once as unavailable, never outcome-unknown. It returns
// "" for any other failure.
func (o dialOptions) misconfigured(ctx context.Context, ep string, err error) string {
	if err == nil || api.IsServerError(err) || api.Refused(err) {
		return ""
	}
	var (
		verify  *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
		record  tls.RecordHeaderError
	)
	msg := err.Error()
	switch {
	case errors.As(err, &verify), errors.As(err, &unknown), errors.As(err, &host), errors.As(err, &invalid):
		return "the server's certificate is not trusted here (" + certCause(err) + "): give the CA that signed it (client.WithTLS RootCAs; CLI: --cacert)"
	case errors.As(err, &record):
		return "the server does not speak TLS: use an http:// endpoint and no TLS options (CLI: no --cacert, --cert or --key)"
	case strings.Contains(msg, "remote error: tls: certificate required"):
		return "the server requires a client certificate: give one (client.WithTLS Certificates; CLI: --cert and --key)"
	case strings.Contains(msg, "remote error: tls: "):
		return "the server refused this client's TLS setup (" + msg[strings.Index(msg, "remote error: tls: ")+len("remote error: "):] + "): a client certificate must be signed by the server's --client-ca"
	case strings.Contains(msg, "frame header looked like an HTTP/1.1 header"), strings.Contains(msg, "malformed HTTP response"):
		return notLeaseholdPort
	case strings.Contains(msg, "HTTP status 404"):
		return "this endpoint is an HTTP server but not a leasehold API (404 Not Found): check the address and port"
	case o.tls == nil && lostConn(err) && speaksTLS(ctx, ep):
		return "the server speaks TLS: use an https:// endpoint with client.WithTLS (CLI: --cacert, or an https:// endpoint)"
	case o.tls == nil && lostConn(err) && answersHTTP1(ctx, ep):
		return notLeaseholdPort
	case o.tls != nil && lostConn(err):
		// TLS 1.3 refuses a client certificate after the client's side of
		// the handshake is done, so the call saw only a closed connection:
		// a handshake of its own reads the server's alert.
		if alert := tlsAlert(ctx, ep, o.tls); alert != "" {
			return o.misconfigured(ctx, ep, errors.New(alert))
		}
	}
	return ""
}

// refusedAtAccept is the refusal of a node that turned the connection
// away at accept: a node at a connection limit writes an HTTP/1.1 429
// whose body is "resource-exhausted: " and the message, whatever it is
// sent, and closes the connection. An HTTP/2 or TLS client sees an HTTP/1.1
// answer where it expected a frame or a TLS record, or only the closed
// connection; a probe that sends HTTP/2's preface tells a refusal from
// another port that speaks HTTP/1.1 (a leasehold node with room answers
// with a frame, so the probe returns after its first read). nil when err
// is not such a failure or the probe got no such refusal.
func refusedAtAccept(ctx context.Context, ep string, err error) *api.Error {
	var record tls.RecordHeaderError
	msg := err.Error()
	if !errors.As(err, &record) && !strings.Contains(msg, "frame header looked like an HTTP/1.1 header") && !strings.Contains(msg, "malformed HTTP response") && !lostConn(err) {
		return nil
	}
	head, body, _ := strings.Cut(prefaceAnswer(ctx, ep), "\r\n\r\n")
	refusal, found := strings.CutPrefix(body, string(api.CodeResourceExhausted)+": ")
	if !strings.HasPrefix(head, refusedStatus) || !found {
		return nil
	}
	return &api.Error{Code: api.CodeResourceExhausted, Message: ep + " refused the connection: " + strings.TrimSpace(refusal)}
}

// refusedStatus starts a node's answer to a connection it refused at
// accept.
const refusedStatus = "HTTP/1.1 429 "

// prefaceAnswer sends HTTP/2's connection preface to the endpoint and
// returns the start of its answer, within probeTimeout: all of it (up to
// 2 KiB, until the close) when it is a refusal at accept, else its first
// bytes ("" when none came).
func prefaceAnswer(ctx context.Context, ep string) string {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", hostPort(ep))
	if err != nil {
		return ""
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(probeTimeout))
	if _, err := conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")); err != nil {
		return ""
	}
	buf := make([]byte, 2048)
	n, _ := io.ReadAtLeast(conn, buf, len(refusedStatus))
	if strings.HasPrefix(string(buf[:n]), refusedStatus) {
		m, _ := io.ReadFull(conn, buf[n:]) // the rest, up to the close
		n += m
	}
	return string(buf[:n])
}

// notLeaseholdPort is the hint for a port that answers HTTP/1.1.
const notLeaseholdPort = "this port does not speak leasehold's API (it answered HTTP/1.1): check the address and port (the API port, 7420 by default)"

// answersHTTP1 reports whether the endpoint answers HTTP/2's connection
// preface in HTTP/1.x: some other HTTP service, not leasehold's API.
func answersHTTP1(ctx context.Context, ep string) bool {
	return strings.HasPrefix(prefaceAnswer(ctx, ep), "HTTP/")
}

// certCause is the x509 part of a verification error.
func certCause(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "x509: "); i >= 0 {
		return msg[i:]
	}
	return msg
}

// speaksTLS reports whether a TLS handshake with the endpoint's address
// gets as far as the server's certificate: a TLS port, to which a
// plaintext request never got through.
func speaksTLS(ctx context.Context, ep string) bool {
	conn, err := probeDial(ctx, ep, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a probe: it sends nothing and trusts nothing
	if err != nil {
		// A TLS server that refuses the probe's (absent) client
		// certificate still answered in TLS.
		return strings.Contains(err.Error(), "remote error: tls: ")
	}
	_ = conn.Close()
	return true
}

// tlsAlert is the TLS alert ("remote error: tls: …") the endpoint sends a
// handshake made with cfg, within probeTimeout; "" when none comes.
func tlsAlert(ctx context.Context, ep string, cfg *tls.Config) string {
	conn, err := probeDial(ctx, ep, cfg.Clone())
	if err == nil {
		defer conn.Close()
		_ = conn.SetReadDeadline(time.Now().Add(probeTimeout))
		_, err = conn.Read(make([]byte, 1))
	}
	if err != nil && strings.Contains(err.Error(), "remote error: tls: ") {
		return err.Error()
	}
	return ""
}

// probeDial makes a TLS connection to the endpoint's address, bounded by
// probeTimeout.
func probeDial(ctx context.Context, ep string, cfg *tls.Config) (*tls.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	d := tls.Dialer{Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", hostPort(ep))
	if err != nil {
		return nil, err
	}
	return conn.(*tls.Conn), nil
}
