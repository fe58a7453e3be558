package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/api"
)

// TestNodeSecretNeverInClear: a node that speaks TLS to other nodes
// refuses to send the node secret to an http:// address (nothing reaches
// it), and sends it over https://.
func TestNodeSecretNeverInClear(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef"
	var seen atomic.Value
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen.Store(r.Header.Get(nodeSecretHeader)) })
	plain := httptest.NewServer(h)
	defer plain.Close()
	secure := httptest.NewUnstartedServer(h)
	secure.EnableHTTP2 = true
	secure.StartTLS()
	defer secure.Close()
	pool := x509.NewCertPool()
	pool.AddCert(secure.Certificate())

	hc := withNodeSecret(peerClient(&tls.Config{RootCAs: pool}), secret)
	defer hc.CloseIdleConnections()
	if resp, err := hc.Get(plain.URL); err == nil || !strings.Contains(err.Error(), "refusing to send the node secret") {
		if resp != nil {
			resp.Body.Close()
		}
		t.Fatalf("GET %s with the node secret: %v; want a refusal", plain.URL, err)
	}
	if v := seen.Load(); v != nil {
		t.Fatalf("the plaintext server received a request (secret %q)", v)
	}
	resp, err := hc.Get(secure.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if v, _ := seen.Load().(string); v != secret {
		t.Fatalf("the TLS server got secret %q, want it", v)
	}
}

// TestPeerHandshakeTimesOut: a node whose API port is bound but not yet
// served (it is still joining) or whose process is paused completes the
// TCP handshake in the kernel and then never answers TLS. A call to it
// fails within peerHandshakeTimeout as not sent, so a forward is retried
// elsewhere instead of waiting out its caller's deadline.
func TestPeerHandshakeTimesOut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close() // bound, never accepted: the kernel completes the handshake
	hc := peerClient(&tls.Config{RootCAs: x509.NewCertPool()})
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 4*peerHandshakeTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+ln.Addr().String()+"/", nil)
	start := time.Now()
	resp, err := hc.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatal("a request to a port that never answers TLS succeeded")
	}
	if ctx.Err() != nil {
		t.Fatalf("the request waited out its caller's deadline (%v): %v", time.Since(start), err)
	}
	if !api.NotSent(err) {
		t.Fatalf("api.NotSent(%v) = false: a request that never got past the TLS handshake was not sent", err)
	}
}
