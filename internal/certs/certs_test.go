package certs_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/certs"
	"github.com/leasehold/leasehold/sequencer"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		t.Fatalf("%s is not a PEM certificate", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestCreateAll(t *testing.T) {
	for _, kt := range []string{certs.KeyECDSA, certs.KeyEd25519} {
		t.Run(kt, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "certs")
			o := certs.Options{Dir: dir, KeyType: kt}
			if err := certs.CreateCA(o); err != nil {
				t.Fatal(err)
			}
			if err := certs.CreateNode(o, []string{"localhost", "127.0.0.1", "node1.example.com"}); err != nil {
				t.Fatal(err)
			}
			if err := certs.CreateClient(o, "worker-A"); err != nil {
				t.Fatal(err)
			}
			if m := mode(t, dir); m != 0o700 {
				t.Errorf("certs dir mode %o, want 700", m)
			}
			for _, f := range []string{certs.CAKey, certs.NodeKey, certs.ClientKey("worker-A")} {
				if m := mode(t, filepath.Join(dir, f)); m != 0o600 {
					t.Errorf("%s mode %o, want 600", f, m)
				}
			}
			ca := readCert(t, filepath.Join(dir, certs.CACert))
			if !ca.IsCA {
				t.Fatal("ca.crt is not a CA")
			}
			pool := x509.NewCertPool()
			pool.AddCert(ca)
			node := readCert(t, filepath.Join(dir, certs.NodeCert))
			for _, host := range []string{"localhost", "127.0.0.1", "node1.example.com"} {
				if _, err := node.Verify(x509.VerifyOptions{Roots: pool, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
					t.Errorf("node cert for %s: %v", host, err)
				}
			}
			if _, err := node.Verify(x509.VerifyOptions{Roots: pool, DNSName: "other.example.com"}); err == nil {
				t.Error("node cert verifies for a host it was not made for")
			}
			if _, err := node.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("node cert as a client (forwarding between nodes): %v", err)
			}
			cl := readCert(t, filepath.Join(dir, certs.ClientCert("worker-A")))
			if cl.Subject.CommonName != "worker-A" {
				t.Errorf("client CN %q", cl.Subject.CommonName)
			}
			if _, err := cl.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("client cert: %v", err)
			}
			if _, err := cl.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
				t.Error("a client certificate is accepted as a server certificate")
			}
			switch kt {
			case certs.KeyEd25519:
				if _, ok := cl.PublicKey.(ed25519.PublicKey); !ok {
					t.Errorf("key type %T, want ed25519", cl.PublicKey)
				}
			default:
				if _, ok := cl.PublicKey.(*ecdsa.PublicKey); !ok {
					t.Errorf("key type %T, want ecdsa", cl.PublicKey)
				}
			}
		})
	}
}

func TestRefuseOverwrite(t *testing.T) {
	dir := t.TempDir()
	o := certs.Options{Dir: dir}
	if err := certs.CreateCA(o); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, certs.CAKey))
	if err := certs.CreateCA(o); !errors.Is(err, certs.ErrExists) {
		t.Fatalf("second create-ca: %v, want ErrExists", err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, certs.CAKey)); !bytes.Equal(before, after) {
		t.Fatal("a refused create-ca changed ca.key")
	}
	// A half-existing pair is refused too, and nothing is written.
	if err := os.WriteFile(filepath.Join(dir, certs.NodeCert), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := certs.CreateNode(o, []string{"localhost"}); !errors.Is(err, certs.ErrExists) {
		t.Fatalf("create-node over node.crt: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, certs.NodeKey)); !os.IsNotExist(err) {
		t.Fatalf("a refused create-node wrote node.key (%v)", err)
	}
	o.Overwrite = true
	if err := certs.CreateCA(o); err != nil {
		t.Fatalf("--overwrite: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, certs.CAKey)); bytes.Equal(before, after) {
		t.Fatal("--overwrite kept the old ca.key")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

func TestInvalid(t *testing.T) {
	dir := t.TempDir()
	o := certs.Options{Dir: dir}
	if err := certs.CreateNode(o, []string{"localhost"}); !errors.Is(err, certs.ErrNoCA) {
		t.Fatalf("create-node without a CA: %v", err)
	}
	if err := certs.CreateCA(certs.Options{Dir: dir, KeyType: "rsa"}); !errors.Is(err, certs.ErrInvalid) {
		t.Fatalf("key type rsa: %v", err)
	}
	if err := certs.CreateCA(o); err != nil {
		t.Fatal(err)
	}
	if err := certs.CreateNode(o, nil); !errors.Is(err, certs.ErrInvalid) {
		t.Fatalf("no hosts: %v", err)
	}
	if err := certs.CreateNode(o, []string{"bad host"}); !errors.Is(err, certs.ErrInvalid) {
		t.Fatalf("bad host: %v", err)
	}
	for _, name := range []string{"", "../evil", ".hidden", "a/b", strings.Repeat("x", 65), "node", "node:"} {
		if err := certs.CreateClient(o, name); !errors.Is(err, certs.ErrInvalid) {
			t.Errorf("client name %q: %v", name, err)
		}
	}
}

// handshake runs one TLS handshake between the configurations over loopback TCP, exchanges a
// byte, and returns the client's and the server's errors.
func handshake(t *testing.T, server, client *tls.Config) (clientErr, serverErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	_ = c.SetDeadline(deadline)
	_ = s.SetDeadline(deadline)
	sc := tls.Server(s, server)
	done := make(chan error, 1)
	go func() {
		err := sc.Handshake()
		if err == nil {
			b := make([]byte, 1)
			if _, err = sc.Read(b); err == nil { // TLS 1.3: a refused client cert shows up here
				_, err = sc.Write(b)
			}
		}
		_ = sc.Close()
		done <- err
	}()
	cc := tls.Client(c, client)
	clientErr = cc.Handshake()
	if clientErr == nil {
		_, clientErr = cc.Write([]byte("x"))
		if clientErr == nil {
			_, clientErr = cc.Read(make([]byte, 1))
		}
	}
	_ = cc.Close()
	return clientErr, <-done
}

func TestTLSConfigs(t *testing.T) {
	dir, otherDir := t.TempDir(), t.TempDir()
	now := time.Now()
	o := certs.Options{Dir: dir}
	for _, err := range []error{
		certs.CreateCA(o), certs.CreateNode(o, []string{"localhost"}), certs.CreateClient(o, "alice"),
		certs.CreateCA(certs.Options{Dir: otherDir}), certs.CreateClient(certs.Options{Dir: otherDir}, "mallory"),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	// An expired client certificate: issued two days ago for one day.
	if err := certs.CreateClient(certs.Options{Dir: dir, Lifetime: 24 * time.Hour, Now: func() time.Time { return now.Add(-48 * time.Hour) }}, "old"); err != nil {
		t.Fatal(err)
	}
	p := func(f string) string { return filepath.Join(dir, f) }
	server, err := certs.ServerConfig(p(certs.NodeCert), p(certs.NodeKey), p(certs.CACert))
	if err != nil {
		t.Fatal(err)
	}
	client := func(ca, cert, key string) *tls.Config {
		t.Helper()
		c, err := certs.ClientConfig(ca, cert, key)
		if err != nil {
			t.Fatal(err)
		}
		c.ServerName = "localhost"
		return c
	}
	if cerr, serr := handshake(t, server, client(p(certs.CACert), p(certs.ClientCert("alice")), p(certs.ClientKey("alice")))); cerr != nil || serr != nil {
		t.Fatalf("good client: %v / %v", cerr, serr)
	}
	for name, tc := range map[string]struct {
		cfg  *tls.Config
		want string // in the server's error
	}{
		"no client certificate": {client(p(certs.CACert), "", ""), "didn't provide a certificate"},
		"client of another CA": {client(p(certs.CACert), filepath.Join(otherDir, certs.ClientCert("mallory")),
			filepath.Join(otherDir, certs.ClientKey("mallory"))), "unknown authority"},
		"expired client": {client(p(certs.CACert), p(certs.ClientCert("old")), p(certs.ClientKey("old"))), "expired"},
	} {
		_, serr := handshake(t, server, tc.cfg)
		if serr == nil || !strings.Contains(serr.Error(), tc.want) {
			t.Errorf("%s: server error %v, want one containing %q", name, serr, tc.want)
		}
	}
	// A client that trusts another CA refuses the server.
	cerr, _ := handshake(t, server, client(filepath.Join(otherDir, certs.CACert), p(certs.ClientCert("alice")), p(certs.ClientKey("alice"))))
	if cerr == nil || !strings.Contains(cerr.Error(), "unknown authority") {
		t.Fatalf("client with the wrong CA: %v", cerr)
	}
	if _, err := certs.ClientConfig("", p(certs.ClientCert("alice")), ""); !errors.Is(err, certs.ErrInvalid) {
		t.Fatalf("--cert without --key: %v", err)
	}
	if _, err := certs.ServerConfig(p(certs.NodeCert), p(certs.NodeKey), p(certs.NodeKey)); !errors.Is(err, certs.ErrInvalid) {
		t.Fatalf("a key as client CA: %v", err)
	}
}

func TestCreateSequencerKey(t *testing.T) {
	dir := t.TempDir()
	o := certs.Options{Dir: dir}
	if err := certs.CreateSequencerKey(o, "c1", "k1", false); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, filepath.Join(dir, certs.SequencerKey)); m != 0o600 {
		t.Fatalf("sequencer.key mode %o", m)
	}
	if err := certs.CreateSequencerKey(o, "c1", "k2", false); !errors.Is(err, certs.ErrExists) {
		t.Fatalf("second create without --rotate: %v", err)
	}
	if err := certs.CreateSequencerKey(o, "c2", "k2", true); !errors.Is(err, certs.ErrInvalid) {
		t.Fatalf("rotate with another cluster id: %v", err)
	}
	if err := certs.CreateSequencerKey(o, "", "k2", true); err != nil {
		t.Fatal(err)
	}
	s, err := sequencer.ReadSignerFile(filepath.Join(dir, certs.SequencerKey))
	if err != nil {
		t.Fatal(err)
	}
	ks, err := sequencer.ReadKeySetFile(filepath.Join(dir, certs.SequencerKeySet))
	if err != nil {
		t.Fatal(err)
	}
	if ks.ClusterID != "c1" || len(ks.Keys) != 2 {
		t.Fatalf("key set after rotation: %+v", ks)
	}
	b, err := s.Sign(sequencer.Sequencer{Name: "a", Token: 1})
	if err != nil {
		t.Fatal(err)
	}
	v, err := sequencer.NewVerifier(ks)
	if err != nil {
		t.Fatal(err)
	}
	if q, err := v.Verify(b, "a"); err != nil || q.KeyID != "k2" {
		t.Fatalf("signed after rotation: %+v %v", q, err)
	}
}
