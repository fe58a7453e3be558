package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/certs"
)

// signClient issues, with the CA in dir, a client-auth-only certificate
// with CN cn, as a CA other than `leasehold certs` might (any CN), and
// returns its TLS config.
func signClient(t *testing.T, dir, cn string) *tls.Config {
	t.Helper()
	ca, err := tls.LoadX509KeyPair(filepath.Join(dir, certs.CACert), filepath.Join(dir, certs.CAKey))
	must(t, "load CA", err)
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	must(t, "parse CA", err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, "key", err)
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	must(t, "serial", err)
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, ca.PrivateKey)
	must(t, "sign", err)
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	must(t, "marshal key", err)
	out := t.TempDir()
	certFile, keyFile := filepath.Join(out, "c.crt"), filepath.Join(out, "c.key")
	must(t, "write cert", os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	must(t, "write key", os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600))
	conf, err := certs.ClientConfig(filepath.Join(dir, certs.CACert), certFile, keyFile)
	must(t, "client config", err)
	return conf
}

// TestCertificateNamesAreNotNodes: two real nodes with mutual TLS and auth
// on. Client certificates of the cluster's CA whose CN is "node", "node:"
// or holds a ':' are not nodes and not anonymous: at the leader and through
// the follower (which forwards the caller's principal), turning auth off,
// minting a token and bumping the token counter are permission-denied.
func TestCertificateNamesAreNotNodes(t *testing.T) {
	dir := t.TempDir()
	o := certs.Options{Dir: dir}
	for _, err := range []error{certs.CreateCA(o), certs.CreateNode(o, []string{"127.0.0.1"}), certs.CreateClient(o, "root")} {
		must(t, "certificates", err)
	}
	p := func(f string) string { return filepath.Join(dir, f) }
	rootTLS, err := certs.ClientConfig(p(certs.CACert), p(certs.ClientCert("root")), p(certs.ClientKey("root")))
	must(t, "client config", err)
	procs := startClusterWith(t, 2, httpsClient(t, rootTLS), "https://",
		"--cert", p(certs.NodeCert), "--key", p(certs.NodeKey), "--client-ca", p(certs.CACert),
		"--peer-cert", p(certs.NodeCert), "--peer-key", p(certs.NodeKey), "--peer-ca", p(certs.CACert),
		"--admin", "root")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	root := clientsFor(t, rootTLS, procs[0].api)
	var mem *connect.Response[pb.MembersResponse]
	waitFor(t, "a leader with both API addresses", func() bool {
		mem, err = root.cluster.Members(ctx, connect.NewRequest(&pb.MembersRequest{}))
		if err != nil || mem.Msg.GetLeaderId() == "" {
			return false
		}
		for _, m := range mem.Msg.GetMembers() {
			if m.GetApiAddr() == "" {
				return false
			}
		}
		return true
	})
	_, err = root.auth.SetEnabled(ctx, connect.NewRequest(&pb.SetEnabledRequest{Enabled: true}))
	must(t, "auth enable", err)

	for _, cn := range []string{"node:", "node", "ip:10.0.0.1", "a:b"} {
		conf := signClient(t, dir, cn)
		for _, pr := range procs {
			role := "follower"
			if pr.id == mem.Msg.GetLeaderId() {
				role = "leader"
			}
			c := clientsFor(t, conf, pr.api)
			what := fmt.Sprintf("CN %q at the %s", cn, role)
			_, err := c.auth.SetEnabled(ctx, connect.NewRequest(&pb.SetEnabledRequest{Enabled: false}))
			wantDenied(t, what+": auth disable", err)
			_, err = c.auth.CreateToken(ctx, connect.NewRequest(&pb.CreateTokenRequest{Principal: "root"}))
			wantDenied(t, what+": token for root", err)
			_, err = c.cluster.BumpToken(ctx, connect.NewRequest(&pb.BumpTokenRequest{MinToken: 1_000_000}))
			wantDenied(t, what+": bump token", err)
		}
	}
	st, err := root.auth.Status(ctx, connect.NewRequest(&pb.AuthStatusRequest{}))
	must(t, "auth status", err)
	if !st.Msg.GetEnabled() {
		t.Fatal("auth was turned off")
	}
}
