package auth

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"testing"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

func verified(cn string, usage ...x509.ExtKeyUsage) *tls.ConnectionState {
	c := &x509.Certificate{Subject: pkix.Name{CommonName: cn}, ExtKeyUsage: usage}
	return &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{c}}}
}

func TestAuthenticate(t *testing.T) {
	tok, rec := NewToken("carol", 1)
	revoked, _ := NewToken("dave", 1)
	st := &fsmpb.AuthState{Enabled: true, Tokens: []*fsmpb.AuthToken{rec}}
	on, off := Compile(st), (*Policies)(nil)
	nodeCert := verified(NodeName, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	const secret, cluster = "s3cret", "c-1"
	cases := []struct {
		name   string
		pol    *Policies
		c      Credentials
		want   Principal
		denied bool
	}{
		{"client certificate", on, Credentials{TLS: verified("alice", x509.ExtKeyUsageClientAuth)}, Principal{Name: "alice"}, false},
		{"admin by certificate", on, Credentials{TLS: verified("root", x509.ExtKeyUsageClientAuth)}, Principal{Name: "root", Admin: true}, false},
		{"node certificate", on, Credentials{TLS: nodeCert}, Principal{Name: NodeName, Node: true}, false},
		{"a client certificate named node is no node", on, Credentials{TLS: verified(NodeName, x509.ExtKeyUsageClientAuth)}, Anonymous, true},
		{"a bad CN with auth off is ignored", off, Credentials{TLS: verified("no spaces", x509.ExtKeyUsageClientAuth)}, Anonymous, false},
		{"node secret", on, Credentials{NodeSecret: secret}, Principal{Name: NodeName, Node: true}, false},
		{"wrong node secret", on, Credentials{NodeSecret: "other"}, Anonymous, true},
		{"wrong node secret, auth off", off, Credentials{NodeSecret: "other"}, Anonymous, false},
		{"bearer token", on, Credentials{Bearer: "Bearer " + tok}, Principal{Name: "carol"}, false},
		{"a token wins over a certificate", on, Credentials{TLS: verified("alice", x509.ExtKeyUsageClientAuth), Bearer: "Bearer " + tok}, Principal{Name: "carol"}, false},
		{"revoked token", on, Credentials{Bearer: "Bearer " + revoked}, Anonymous, true},
		{"revoked token, auth off", off, Credentials{TLS: verified("root", x509.ExtKeyUsageClientAuth), Bearer: "Bearer " + revoked}, Principal{Name: "root", Admin: true}, false},
		{"not a bearer header", on, Credentials{Bearer: "Basic x"}, Anonymous, true},
		{"forwarded by a node of this cluster", on, Credentials{NodeSecret: secret, ClusterID: cluster, Forwarded: "alice"}, Principal{Name: "alice"}, false},
		{"forwarded admin", on, Credentials{TLS: nodeCert, ClusterID: cluster, Forwarded: "root"}, Principal{Name: "root", Admin: true}, false},
		{"forwarded node", on, Credentials{NodeSecret: secret, ClusterID: cluster, Forwarded: ForwardedNode}, Principal{Name: NodeName, Node: true}, false},
		{"forwarded anonymous", on, Credentials{NodeSecret: secret, ClusterID: cluster, Forwarded: "ip:10.0.0.1"}, Anonymous, false},
		{"forwarded bad name", on, Credentials{NodeSecret: secret, ClusterID: cluster, Forwarded: "a b"}, Principal{Name: NodeName, Node: true}, true},
		{"forwarded from another cluster", on, Credentials{NodeSecret: secret, ClusterID: "c-2", Forwarded: "alice"}, Principal{Name: NodeName, Node: true}, true},
		{"forwarded by a client", on, Credentials{TLS: verified("alice", x509.ExtKeyUsageClientAuth), ClusterID: cluster, Forwarded: "root"}, Principal{Name: "alice"}, true},
		{"forwarded by a client, auth off: ignored", off, Credentials{TLS: verified("alice", x509.ExtKeyUsageClientAuth), ClusterID: cluster, Forwarded: "root"}, Principal{Name: "alice"}, false},
	}
	for _, c := range cases {
		a := &Authenticator{NodeSecret: secret, Admins: []string{"root"}, ClusterID: func() string { return cluster }, Policies: func() *Policies { return c.pol }}
		got, err := a.Authenticate(c.c)
		if got != c.want || (err != nil) != c.denied {
			t.Errorf("%s: Authenticate = %+v, %v; want %+v, denied %v", c.name, got, err, c.want, c.denied)
		}
		if err != nil && !errors.Is(err, ErrDenied) {
			t.Errorf("%s: %v does not match ErrDenied", c.name, err)
		}
	}
}

func TestCredentials(t *testing.T) {
	if !(Credentials{}).None() || !(Credentials{TLS: &tls.ConnectionState{}}).None() {
		t.Error("no credential: None")
	}
	for _, c := range []Credentials{{Bearer: "x"}, {NodeSecret: "x"}, {Forwarded: "x"}, {TLS: verified("alice")}} {
		if c.None() {
			t.Errorf("%+v presents a credential", c)
		}
	}
	a := &Authenticator{NodeSecret: "s"}
	if !a.NodeCredential(nil, "s") || a.NodeCredential(nil, "t") || a.NodeCredential(nil, "") || (&Authenticator{}).NodeCredential(nil, "") {
		t.Error("NodeCredential by secret")
	}
	if !a.NodeCredential(verified(NodeName, x509.ExtKeyUsageServerAuth), "") || a.NodeCredential(verified(NodeName, x509.ExtKeyUsageClientAuth), "") {
		t.Error("NodeCredential by certificate")
	}
}

func TestBootstrapCredential(t *testing.T) {
	a := &Authenticator{NodeSecret: "s", Admins: []string{"root"}}
	root := Principal{Name: "root", Admin: true}
	cases := []struct {
		name string
		p    Principal
		c    Credentials
		want bool
	}{
		{"node secret", Principal{Name: NodeName, Node: true}, Credentials{NodeSecret: "s"}, true},
		{"node certificate", Principal{Name: NodeName, Node: true}, Credentials{TLS: verified(NodeName, x509.ExtKeyUsageServerAuth)}, true},
		{"admin by certificate", root, Credentials{TLS: verified("root", x509.ExtKeyUsageClientAuth)}, true},
		{"admin certificate with a bearer token", root, Credentials{TLS: verified("root", x509.ExtKeyUsageClientAuth), Bearer: "Bearer x"}, false},
		{"admin by token only", root, Credentials{Bearer: "Bearer x"}, false},
		{"a certificate of another principal", root, Credentials{TLS: verified("alice", x509.ExtKeyUsageClientAuth)}, false},
		{"an admin's certificate under another principal", Principal{Name: "carol"}, Credentials{TLS: verified("root", x509.ExtKeyUsageClientAuth)}, false},
		{"a certificate of a non-admin", Principal{Name: "alice"}, Credentials{TLS: verified("alice", x509.ExtKeyUsageClientAuth)}, false},
		{"wrong node secret", Anonymous, Credentials{NodeSecret: "t"}, false},
	}
	for _, c := range cases {
		if got := a.BootstrapCredential(c.p, c.c); got != c.want {
			t.Errorf("%s: BootstrapCredential = %v, want %v", c.name, got, c.want)
		}
	}
}
