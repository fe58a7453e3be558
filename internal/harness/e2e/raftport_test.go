package e2e

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/certs"
)

// The Raft handshake as a peer speaks it: "LHR1", a status byte, then the
// cluster id and the node id, each after its length in one byte.
func raftHello(clusterID, nodeID string) []byte {
	b := append([]byte("LHR1"), 0, byte(len(clusterID)))
	b = append(b, clusterID...)
	b = append(b, byte(len(nodeID)))
	return append(b, nodeID...)
}

// readRaftHello reads the acceptor's hello; ok is false when the
// connection ended before a whole one.
func readRaftHello(c net.Conn) (status byte, clusterID string, ok bool) {
	var head [6]byte
	if _, err := io.ReadFull(c, head[:]); err != nil || string(head[:4]) != "LHR1" {
		return 0, "", false
	}
	cid := make([]byte, head[5])
	if _, err := io.ReadFull(c, cid); err != nil {
		return 0, "", false
	}
	return head[4], string(cid), true
}

// sayHello sends a hello naming clusterID on c and returns the answer, or
// everything read before the connection closed.
func sayHello(t *testing.T, c net.Conn, clusterID string) (status byte, cid string, ok bool, rest string) {
	t.Helper()
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(raftHello(clusterID, "evil")); err != nil {
		return 0, "", false, ""
	}
	status, cid, ok = readRaftHello(c)
	if !ok {
		b, _ := io.ReadAll(c)
		rest = string(b)
	}
	return status, cid, ok, rest
}

const zeroClusterID = "00000000000000000000000000000000"

// TestRaftPortNodeCertificatesOnly: a real node with Raft over mutual TLS
// lets in only a node certificate of its CA. A client certificate of the
// same CA, a node certificate of another CA, and plaintext are refused
// before the hello and are told nothing (no cluster id).
func TestRaftPortNodeCertificatesOnly(t *testing.T) {
	dir, otherDir := t.TempDir(), t.TempDir()
	o := certs.Options{Dir: dir}
	for _, err := range []error{certs.CreateCA(o), certs.CreateNode(o, []string{"127.0.0.1"}), certs.CreateClient(o, "attacker"),
		certs.CreateCA(certs.Options{Dir: otherDir}), certs.CreateNode(certs.Options{Dir: otherDir}, []string{"127.0.0.1"})} {
		must(t, "certificates", err)
	}
	p := func(f string) string { return filepath.Join(dir, f) }
	apiTLS, err := certs.ClientConfig(p(certs.CACert), p(certs.NodeCert), p(certs.NodeKey))
	must(t, "client config", err)
	procs := startClusterWith(t, 1, httpsClient(t, apiTLS), "https://",
		"--cert", p(certs.NodeCert), "--key", p(certs.NodeKey), "--client-ca", p(certs.CACert),
		"--peer-cert", p(certs.NodeCert), "--peer-key", p(certs.NodeKey), "--peer-ca", p(certs.CACert))
	raftAddr := procs[0].raft
	dialTLS := func(certFile, keyFile string) net.Conn {
		conf, err := certs.ClientConfig(p(certs.CACert), certFile, keyFile)
		must(t, "tls config", err)
		conf.ServerName = "127.0.0.1"
		raw, err := net.Dial("tcp", raftAddr)
		must(t, "dial raft port", err)
		return tls.Client(raw, conf)
	}

	// A node certificate is a peer: a wrong cluster id is refused naming
	// the right one, which is then accepted.
	status, cid, ok, _ := sayHello(t, dialTLS(p(certs.NodeCert), p(certs.NodeKey)), zeroClusterID)
	if !ok || status != 1 || cid == zeroClusterID || cid == "" {
		t.Fatalf("node certificate, wrong cluster id: status %d cluster %q ok %v; want refused naming the cluster", status, cid, ok)
	}
	if status, _, ok, _ := sayHello(t, dialTLS(p(certs.NodeCert), p(certs.NodeKey)), cid); !ok || status != 0 {
		t.Fatalf("node certificate, right cluster id: status %d ok %v; want accepted", status, ok)
	}

	for name, c := range map[string]func() net.Conn{
		"client certificate": func() net.Conn {
			return dialTLS(p(certs.ClientCert("attacker")), p(certs.ClientKey("attacker")))
		},
		"node certificate of another CA": func() net.Conn {
			return dialTLS(filepath.Join(otherDir, certs.NodeCert), filepath.Join(otherDir, certs.NodeKey))
		},
		"plaintext": func() net.Conn {
			raw, err := net.Dial("tcp", raftAddr)
			must(t, "dial raft port", err)
			return raw
		},
	} {
		if _, _, ok, rest := sayHello(t, c(), cid); ok || strings.Contains(rest, cid) {
			t.Errorf("%s: was answered with a hello (%q); want the connection refused before it", name, rest)
		}
	}
}

// TestRaftPortNodeSecret: a real node with --node-secret-file and a
// plaintext Raft port lets in only a peer that proves the secret. A plain
// hello and a wrong proof are refused and told nothing (no cluster id); the
// secret itself never crosses the wire.
func TestRaftPortNodeSecret(t *testing.T) {
	secretFile := filepath.Join(t.TempDir(), "node.secret")
	secret := strings.Repeat("5e", 32)
	must(t, "secret", os.WriteFile(secretFile, []byte(secret+"\n"), 0o600))
	procs := startClusterWith(t, 1, http.DefaultClient, "http://", "--node-secret-file", secretFile)
	raftAddr := procs[0].raft
	dial := func() net.Conn {
		c, err := net.Dial("tcp", raftAddr)
		must(t, "dial raft port", err)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		return c
	}
	mac := func(key, role string, nd, na []byte) []byte {
		m := hmac.New(sha256.New, []byte(key))
		m.Write([]byte("leasehold raft " + role))
		m.Write(nd)
		m.Write(na)
		return m.Sum(nil)
	}
	// prove runs the dialer's side of the proof with key and reports
	// whether the node proved itself back.
	prove := func(c net.Conn, key string) bool {
		nd := make([]byte, 32)
		_, _ = rand.Read(nd)
		if _, err := c.Write(append([]byte("LHP1"), nd...)); err != nil {
			return false
		}
		head := make([]byte, 4+32)
		if _, err := io.ReadFull(c, head); err != nil || string(head[:4]) != "LHP1" {
			t.Fatalf("the node's challenge: %q, %v", head, err)
		}
		na := head[4:]
		if _, err := c.Write(mac(key, "dialer", nd, na)); err != nil {
			return false
		}
		got := make([]byte, sha256.Size)
		if _, err := io.ReadFull(c, got); err != nil {
			return false
		}
		if !hmac.Equal(got, mac(key, "acceptor", nd, na)) {
			t.Fatalf("the node's proof is wrong")
		}
		return true
	}

	if _, _, ok, rest := sayHello(t, dial(), zeroClusterID); ok || rest != "" {
		t.Fatalf("a plain hello was answered (%q); want the connection refused", rest)
	}
	c := dial()
	if prove(c, strings.Repeat("0", 64)) {
		t.Fatal("a wrong secret was accepted")
	}
	if b, _ := io.ReadAll(c); len(b) != 0 {
		t.Fatalf("after a wrong proof the node sent %q", b)
	}
	_ = c.Close()

	c = dial()
	if !prove(c, secret) {
		t.Fatal("the right secret was refused")
	}
	status, cid, ok, _ := sayHello(t, c, zeroClusterID)
	if !ok || status != 1 || cid == "" || cid == zeroClusterID {
		t.Fatalf("a proven peer with a wrong cluster id: status %d cluster %q ok %v; want refused naming the cluster", status, cid, ok)
	}
}

// httpsClient is an HTTP/1.1 and HTTP/2 client with conf.
func httpsClient(t *testing.T, conf *tls.Config) *http.Client {
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: conf, Protocols: &protos}, Timeout: 5 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	return hc
}
