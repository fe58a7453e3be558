package raftnode

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/internal/certs"
)

// peerTLS is the Raft TLS config serve builds from --peer-cert, --peer-key
// and --peer-ca.
func peerTLS(t *testing.T, certFile, keyFile, caFile string) *tls.Config {
	t.Helper()
	conf, err := certs.ServerConfig(certFile, keyFile, caFile)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := certs.ClientConfig(caFile, certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	conf.RootCAs = cl.RootCAs
	return conf
}

// testCA creates a CA, a node certificate for 127.0.0.1 and the client
// certificates named in dir.
func testCA(t *testing.T, clients ...string) func(string) string {
	t.Helper()
	dir := t.TempDir()
	o := certs.Options{Dir: dir}
	if err := certs.CreateCA(o); err != nil {
		t.Fatal(err)
	}
	if err := certs.CreateNode(o, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range clients {
		if err := certs.CreateClient(o, c); err != nil {
			t.Fatal(err)
		}
	}
	return func(f string) string { return filepath.Join(dir, f) }
}

// refusedSilently dials the acceptor at addr over c (already wrapped as
// the attacker likes), sends a hello naming a wrong cluster id, and
// returns what came back before the connection closed.
func refusedSilently(t *testing.T, c net.Conn) string {
	t.Helper()
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = c.Write(hello{status: helloOK, clusterID: "00000000000000000000000000000000", nodeID: "evil"}.encode())
	b, _ := io.ReadAll(c)
	return string(b)
}

// TestStreamLayerNodeCertificatesOnly: with peer TLS, only a node
// certificate of the configured CA is a peer. A client certificate of the
// same CA (even one named "node"), a node certificate of another CA, and
// plaintext are refused during the handshake and learn nothing: no hello,
// no cluster id.
func TestStreamLayerNodeCertificatesOnly(t *testing.T) {
	p := testCA(t, "alice")
	other := testCA(t)
	id := newClusterID()
	srvConf := peerTLS(t, p(certs.NodeCert), p(certs.NodeKey), p(certs.CACert))
	srv, srvLog := newTestStream(t, srvConf, id, "n1")
	errs := serveEcho(t, srv)

	node, _ := newTestStream(t, peerTLS(t, p(certs.NodeCert), p(certs.NodeKey), p(certs.CACert)), id, "n2")
	c, err := node.Dial(raft.ServerAddress(srv.Addr().String()), 5*time.Second)
	if err != nil {
		t.Fatalf("a node certificate was refused: %v", err)
	}
	roundTrip(t, c)
	_ = c.Close()
	if err := <-errs; err != nil {
		t.Fatalf("server side of a node's connection: %v", err)
	}

	for name, conf := range map[string]*tls.Config{
		"client certificate":             peerTLS(t, p(certs.ClientCert("alice")), p(certs.ClientKey("alice")), p(certs.CACert)),
		"node certificate of another CA": peerTLS(t, other(certs.NodeCert), other(certs.NodeKey), p(certs.CACert)),
	} {
		t.Run(name, func(t *testing.T) {
			cli, _ := newTestStream(t, conf, id, "evil")
			if c, err := cli.Dial(raft.ServerAddress(srv.Addr().String()), 5*time.Second); err == nil {
				_ = c.Close()
				t.Fatal("let in")
			}
			if err := <-errs; err == nil {
				t.Fatal("the acceptor finished the connection")
			}
			raw, err := net.Dial("tcp", srv.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			conf := conf.Clone()
			conf.ServerName = "127.0.0.1"
			if got := refusedSilently(t, tls.Client(raw, conf)); got != "" {
				t.Fatalf("an unproven peer was told %q", got)
			}
			<-errs
		})
	}
	raw, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if got := refusedSilently(t, raw); strings.Contains(got, id) || strings.Contains(got, helloMagic) {
		t.Fatalf("a plaintext peer was told %q", got)
	}
	if err := <-errs; err == nil {
		t.Fatal("the acceptor finished a plaintext connection")
	}
	if l := srvLog.String(); !strings.Contains(l, "not a node certificate") {
		t.Errorf("acceptor logged %q; want the refused certificate named", l)
	}
}

// TestStreamLayerSecret: with a node secret, a peer proving the same secret
// is let in; a wrong secret, no proof at all (a plain hello), and a proof
// offered to a node without a secret are refused on both ends, and the
// unproven end learns no cluster id.
func TestStreamLayerSecret(t *testing.T) {
	id := newClusterID()
	secret := []byte(strings.Repeat("s", 32))
	srv, srvLog := newTestStreamWith(t, nil, secret, id, "n1")
	errs := serveEcho(t, srv)

	same, _ := newTestStreamWith(t, nil, secret, id, "n2")
	c, err := same.Dial(raft.ServerAddress(srv.Addr().String()), 5*time.Second)
	if err != nil {
		t.Fatalf("dial with the secret: %v", err)
	}
	roundTrip(t, c)
	_ = c.Close()
	if err := <-errs; err != nil {
		t.Fatalf("server side of a proven connection: %v", err)
	}

	wrong, wrongLog := newTestStreamWith(t, nil, []byte(strings.Repeat("w", 32)), id, "evil")
	if c, err := wrong.Dial(raft.ServerAddress(srv.Addr().String()), 5*time.Second); err == nil || !errors.Is(err, errUnproven) {
		if c != nil {
			_ = c.Close()
		}
		t.Fatalf("dial with a wrong secret: %v, want errUnproven", err)
	}
	if err := <-errs; !errors.Is(err, errUnproven) {
		t.Fatalf("server side of a wrong secret: %v, want errUnproven", err)
	}
	if l := wrongLog.String(); !strings.Contains(l, `peer_cluster=""`) || !strings.Contains(l, "level=WARN") {
		t.Errorf("the dialer with a wrong secret logged %q: want a WARN and no peer cluster id", l)
	}

	none, _ := newTestStream(t, nil, id, "evil")
	if c, err := none.Dial(raft.ServerAddress(srv.Addr().String()), 5*time.Second); err == nil {
		_ = c.Close()
		t.Fatal("a peer without the secret was let in")
	}
	if err := <-errs; !errors.Is(err, errUnproven) {
		t.Fatalf("server side of a plain hello: %v, want errUnproven", err)
	}
	raw, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if got := refusedSilently(t, raw); got != "" {
		t.Fatalf("a plain hello was told %q", got)
	}
	<-errs
	if l := srvLog.String(); !strings.Contains(l, "sent no proof of the node secret") {
		t.Errorf("acceptor logged %q; want the missing proof named", l)
	}

	plain, _ := newTestStream(t, nil, id, "n3")
	errsPlain := serveEcho(t, plain)
	if c, err := same.Dial(raft.ServerAddress(plain.Addr().String()), 5*time.Second); err == nil {
		_ = c.Close()
		t.Fatal("a node with a secret connected to one without")
	}
	if err := <-errsPlain; !errors.Is(err, errUnproven) || !strings.Contains(err.Error(), "this node has none") {
		t.Fatalf("a node without a secret, offered a proof: %v", err)
	}
}
