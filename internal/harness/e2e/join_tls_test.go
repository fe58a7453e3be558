package e2e

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/certs"
)

// TestJoinTLSCluster: a node joins a running cluster that serves only TLS,
// with auth enabled and a node secret: the join goes over TLS with the
// node's certificate, the new member catches up over Raft mutual TLS and
// is promoted to voter (its applied index asked over TLS), and a lock
// taken through it survives. A node told to join through an address that
// does not speak TLS sends a TLS handshake and nothing else: the node
// secret never crosses in clear.
func TestJoinTLSCluster(t *testing.T) {
	dir := t.TempDir()
	o := certs.Options{Dir: dir}
	for _, err := range []error{certs.CreateCA(o), certs.CreateNode(o, []string{"127.0.0.1"}), certs.CreateClient(o, "root")} {
		must(t, "certificates", err)
	}
	p := func(f string) string { return filepath.Join(dir, f) }
	secretFile := filepath.Join(t.TempDir(), "node.secret")
	must(t, "secret", os.WriteFile(secretFile, []byte(strings.Repeat("7a", 32)+"\n"), 0o600))
	flags := []string{"--cert", p(certs.NodeCert), "--key", p(certs.NodeKey), "--client-ca", p(certs.CACert),
		"--peer-cert", p(certs.NodeCert), "--peer-key", p(certs.NodeKey), "--peer-ca", p(certs.CACert),
		"--node-secret-file", secretFile, "--admin", "root"}
	rootTLS, err := certs.ClientConfig(p(certs.CACert), p(certs.ClientCert("root")), p(certs.ClientKey("root")))
	must(t, "client config", err)

	procs := newProcs(t, 3)
	stopAtEnd(t, procs)
	procs[0].start(t, procs[0].id+"="+procs[0].raft, flags...)
	waitHealthyURL(t, httpsClient(t, rootTLS), "https://"+procs[0].api)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, procs[0].api, client.WithTLS(rootTLS))
	must(t, "dial", err)
	defer c.Close()
	as, err := c.AuthService()
	must(t, "auth service", err)
	_, err = as.SetEnabled(ctx, connect.NewRequest(&pb.SetEnabledRequest{Enabled: true}))
	must(t, "auth enable", err)

	procs[1].start(t, "", append([]string{"--join", procs[0].api}, flags...)...)
	waitLong(t, "n2 a voter", 30*time.Second, func() bool {
		ms, _, err := c.Members(ctx)
		if err != nil || len(ms) != 2 {
			return false
		}
		for _, m := range ms {
			if m.GetSuffrage() != "Voter" {
				return false
			}
		}
		return true
	})
	c2, err := client.Dial(ctx, procs[1].api, client.WithTLS(rootTLS))
	must(t, "dial n2", err)
	defer c2.Close()
	s, err := c2.NewSession(ctx)
	must(t, "session through n2", err)
	defer s.Close(context.WithoutCancel(ctx))
	_, err = s.Acquire(ctx, "join:tls")
	must(t, "acquire through n2", err)

	// A join pointed at a plaintext listener: the first bytes are a TLS
	// handshake record.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, "listen", err)
	defer ln.Close()
	procs[2].start(t, "", append([]string{"--join", ln.Addr().String()}, flags...)...)
	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(20 * time.Second))
	conn, err := ln.Accept()
	must(t, "the joining node's connection", err)
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	first := make([]byte, 5)
	_, err = io.ReadFull(conn, first)
	must(t, "read the join's first bytes", err)
	if first[0] != 0x16 { // a TLS handshake record
		t.Fatalf("the join began with %q, not a TLS handshake", first)
	}
}
