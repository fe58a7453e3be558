package httpedge

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestNodeSecretNeverInClear: a node that speaks TLS to other nodes
// refuses to send the node secret to an http:// address (nothing reaches
// it), and sends it over https://.
func TestNodeSecretNeverInClear(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef"
	var seen atomic.Value
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen.Store(r.Header.Get(NodeSecretHeader)) })
	plain := httptest.NewServer(h)
	defer plain.Close()
	secure := httptest.NewUnstartedServer(h)
	secure.EnableHTTP2 = true
	secure.StartTLS()
	defer secure.Close()
	pool := x509.NewCertPool()
	pool.AddCert(secure.Certificate())

	hc := WithNodeSecret(PeerClient(&tls.Config{RootCAs: pool}), secret)
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
