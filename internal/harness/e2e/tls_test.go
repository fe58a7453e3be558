package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/certs"
)

// TestTLSCluster: three real processes serving mutual TLS. A client that verifies them
// acquires through a follower (which forwards to the leader over TLS with its node
// certificate), the token counter endpoint answers through a follower, and a plaintext client
// is refused with a message naming TLS.
func TestTLSCluster(t *testing.T) {
	dir := t.TempDir()
	o := certs.Options{Dir: dir}
	for _, err := range []error{certs.CreateCA(o), certs.CreateNode(o, []string{"127.0.0.1"}), certs.CreateClient(o, "alice")} {
		if err != nil {
			t.Fatal(err)
		}
	}
	p := func(f string) string { return filepath.Join(dir, f) }
	tlsCfg, err := certs.ClientConfig(p(certs.CACert), p(certs.ClientCert("alice")), p(certs.ClientKey("alice")))
	if err != nil {
		t.Fatal(err)
	}
	hc := httpsClient(t, tlsCfg)
	procs := startClusterWith(t, 3, hc, "https://",
		"--cert", p(certs.NodeCert), "--key", p(certs.NodeKey), "--client-ca", p(certs.CACert),
		"--peer-cert", p(certs.NodeCert), "--peer-key", p(certs.NodeKey), "--peer-ca", p(certs.CACert))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, endpoints(procs), client.WithTLS(tlsCfg))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	follower := procs[0]
	if leader := leaderOf(ctx, t, c, procs); leader == follower {
		follower = procs[1]
	}

	fc, err := client.Dial(ctx, follower.api, client.WithTLS(tlsCfg))
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	s, err := fc.NewSession(ctx, client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatalf("session through follower %s: %v", follower.id, err)
	}
	defer s.Close(context.WithoutCancel(ctx))
	l, err := s.Acquire(ctx, "tls:cluster")
	if err != nil {
		t.Fatalf("acquire through follower %s: %v", follower.id, err)
	}

	resp, err := hc.Get("https://" + follower.api + "/v1/token-counter")
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Token uint64 `json:"token"`
	}
	err = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || body.Token < l.Token() {
		t.Fatalf("token counter through a follower: %d %+v %v; want >= %d", resp.StatusCode, body, err, l.Token())
	}

	plain, err := client.Dial(ctx, follower.api, client.WithRetryTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, _, err = plain.List(ctx, ""); err == nil || !strings.Contains(err.Error(), "the server speaks TLS") {
		t.Fatalf("plaintext client against the TLS cluster: %v", err)
	}
}
