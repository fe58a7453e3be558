package httpedge

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/leasehold/leasehold/api"
)

// TestPeerHandshakeTimesOut: a node whose API port is bound but not yet
// served (it is still joining) or whose process is paused completes the
// TCP handshake in the kernel and then never answers TLS. A call to it
// fails within PeerHandshakeTimeout as not sent, so a forward is retried
// elsewhere instead of waiting out its caller's deadline.
func TestPeerHandshakeTimesOut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close() // bound, never accepted: the kernel completes the handshake
	hc := PeerClient(&tls.Config{RootCAs: x509.NewCertPool()})
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 4*PeerHandshakeTimeout)
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
