package raftnode

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// logBuffer collects log lines for assertions.
type logBuffer struct {
	mu  sync.Mutex // protects following
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newTestStream(t *testing.T, tlsConf *tls.Config, clusterID, nodeID string) (*streamLayer, *logBuffer) {
	t.Helper()
	return newTestStreamWith(t, tlsConf, nil, clusterID, nodeID)
}

func newTestStreamWith(t *testing.T, tlsConf *tls.Config, secret []byte, clusterID, nodeID string) (*streamLayer, *logBuffer) {
	t.Helper()
	lb := &logBuffer{}
	s, err := newStreamLayer("127.0.0.1:0", tlsConf, secret, clusterID, nodeID, testLoggerTo(t, lb))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, lb
}

// serveEcho accepts connections on s and echoes what they send, until s
// is closed; the returned channel gets each connection's read error.
func serveEcho(t *testing.T, s *streamLayer) <-chan error {
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = s.Close() // ends Accept
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := s.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_, err := io.Copy(c, c)
				errs <- err
			})
		}
	})
	return errs
}

func roundTrip(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	var got [4]byte
	if _, err := io.ReadFull(c, got[:]); err != nil || string(got[:]) != "ping" {
		t.Fatalf("echo: %q, %v", got, err)
	}
}

// TestStreamLayerClusterID: peers of one cluster talk; a peer of another
// cluster is refused on both ends, and both log why at WARN.
func TestStreamLayerClusterID(t *testing.T) {
	a, b := newClusterID(), newClusterID()
	for _, withTLS := range []bool{false, true} {
		name := "tcp"
		var conf *tls.Config
		if withTLS {
			name, conf = "tls", testTLS(t)
		}
		t.Run(name, func(t *testing.T) {
			srv, srvLog := newTestStream(t, conf, a, "n1")
			errs := serveEcho(t, srv)

			same, _ := newTestStream(t, conf, a, "n2")
			c, err := same.Dial(raft.ServerAddress(srv.Addr().String()), 5*time.Second)
			if err != nil {
				t.Fatalf("dial within one cluster: %v", err)
			}
			roundTrip(t, c)
			_ = c.Close()
			if err := <-errs; err != nil {
				t.Fatalf("server side of a good connection: %v", err)
			}

			other, otherLog := newTestStream(t, conf, b, "x9")
			c, err = other.Dial(raft.ServerAddress(srv.Addr().String()), 5*time.Second)
			if err == nil {
				_ = c.Close()
				t.Fatal("a peer of another cluster was let in")
			}
			if !errors.Is(err, ErrClusterMismatch) {
				t.Fatalf("dial into another cluster: %v, want ErrClusterMismatch", err)
			}
			if err := <-errs; !errors.Is(err, ErrClusterMismatch) {
				t.Fatalf("server side of a foreign connection: %v, want ErrClusterMismatch", err)
			}
			for who, lb := range map[string]*logBuffer{"acceptor": srvLog, "dialer": otherLog} {
				if l := lb.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "raft connection refused") || !strings.Contains(l, b) {
					t.Errorf("%s logged %q; want a WARN naming the foreign cluster", who, l)
				}
			}
		})
	}
}

// TestStreamLayerTLSRequiresCertificate: with mutual TLS a dialer without
// a client certificate gets no connection.
func TestStreamLayerTLSRequiresCertificate(t *testing.T) {
	id := newClusterID()
	conf := testTLS(t)
	srv, _ := newTestStream(t, conf, id, "n1")
	errs := serveEcho(t, srv)
	noCert := conf.Clone()
	noCert.Certificates = nil
	cli, _ := newTestStream(t, noCert, id, "n2")
	c, err := cli.Dial(raft.ServerAddress(srv.Addr().String()), 5*time.Second)
	if err == nil {
		_ = c.Close()
		t.Fatal("a dialer without a certificate was let in")
	}
	if err := <-errs; err == nil {
		t.Fatal("the acceptor finished a connection without a client certificate")
	}
}

// TestStreamLayerRefusesNonHandshake: a client that speaks raft (or
// anything else) without the handshake is cut off.
func TestStreamLayerRefusesNonHandshake(t *testing.T) {
	srv, _ := newTestStream(t, nil, newClusterID(), "n1")
	errs := serveEcho(t, srv)
	c, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte{0, 1, 2, 3, 4, 5, 6, 7}); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err == nil || !strings.Contains(err.Error(), "not a leasehold raft handshake") {
		t.Fatalf("server side: %v, want a refused handshake", err)
	}
}

// testTLS is a mutual-TLS config with one self-signed certificate for
// 127.0.0.1, trusted as both server and client certificate.
func testTLS(t *testing.T) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "node"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}
}

// TestRaftAddrAsConfigured: a node advertises its raft address as given (a
// DNS name stays a name, so peers still find it after its IP changes);
// with port 0 it advertises the port it got.
func TestRaftAddrAsConfigured(t *testing.T) {
	cfg := tcpConfig(t, "n1")
	_, port, _ := net.SplitHostPort(cfg.RaftAddr)
	cfg.RaftAddr = net.JoinHostPort("localhost", port)
	cfg.Bootstrap = []Peer{{ID: "n1", RaftAddr: cfg.RaftAddr}}
	n := open(t, cfg)
	if got := n.RaftAddr(); got != cfg.RaftAddr {
		t.Fatalf("RaftAddr() = %q, want %q as configured", got, cfg.RaftAddr)
	}
	sl, err := newStreamLayer("127.0.0.1:0", nil, nil, newClusterID(), "n2", testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Close()
	if got := sl.Addr().String(); got != sl.ln.Addr().String() {
		t.Fatalf("with port 0: Addr() = %q, want the listener's %q", got, sl.ln.Addr())
	}
}
