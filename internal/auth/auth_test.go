package auth

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

func TestAllow(t *testing.T) {
	pol := Compile(&fsmpb.AuthState{Enabled: true, Policies: []*fsmpb.AuthPolicy{
		{Name: "a", Principals: []string{"alice"}, Permissions: []string{"lock", "read"}, Prefixes: []string{"report:"}},
		{Name: "all", Principals: []string{"*"}, Permissions: []string{"kv-read"}},
		{Name: "ops", Principals: []string{"ops"}, Permissions: []string{"admin"}},
	}})
	alice, bob, ops := Principal{Name: "alice"}, Principal{Name: "bob"}, Principal{Name: "ops"}
	cases := []struct {
		p    Principal
		perm Perm
		name string
		want bool
	}{
		{alice, PermLock, "report:1", true},
		{alice, PermRead, "report:", true},
		{alice, PermRead, "", false}, // listing everything is wider than the grant
		{alice, PermLock, "other", false},
		{alice, PermKVWrite, "report:1", false},
		{alice, PermKVRead, "x", true}, // "*"
		{bob, PermKVRead, "x", true},
		{bob, PermLock, "report:1", false},
		{Anonymous, PermKVRead, "x", false}, // "*" is any authenticated principal
		{ops, PermKVWrite, "anything", true},
		{Principal{Name: "node", Node: true}, PermAdmin, "", true},
		{Principal{Name: "x", Admin: true}, PermAdmin, "", true},
	}
	for _, c := range cases {
		if got := pol.Allow(c.p, c.perm, c.name); got != c.want {
			t.Errorf("Allow(%v, %v, %q) = %v, want %v", c.p, c.perm, c.name, got, c.want)
		}
	}
	var off *Policies
	if !off.Allow(Anonymous, PermAdmin, "") {
		t.Error("auth off must allow everything")
	}
	if !pol.AllowAny(alice, PermLock) || pol.AllowAny(bob, PermLock) {
		t.Error("AllowAny")
	}
}

func TestIsNodeCert(t *testing.T) {
	node := &x509.Certificate{Subject: pkix.Name{CommonName: "node"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	client := &x509.Certificate{Subject: pkix.Name{CommonName: "node"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if !IsNodeCert(node) || IsNodeCert(client) {
		t.Fatal("a client certificate named node must not be a node")
	}
	if ValidPrincipal("node") || ValidPrincipal("") || !ValidPrincipal("alice@example") {
		t.Fatal("ValidPrincipal")
	}
}

func TestTokenFormat(t *testing.T) {
	tok, rec := NewToken("alice", 0)
	id, ok := TokenID(tok)
	sum := Hash(tok)
	if !ok || id != rec.GetId() || string(rec.GetSha256()) != string(sum[:]) {
		t.Fatalf("token %q record %v", tok, rec)
	}
	pol := Compile(&fsmpb.AuthState{Tokens: []*fsmpb.AuthToken{rec}})
	if _, err := pol.Authenticate(tok[:len(tok)-1] + "x"); err == nil {
		t.Fatal("an altered token authenticates")
	}
}

// A token record without proven was minted by v0.1.0, which let any caller
// mint while auth was off: presenting it is refused, whoever it names.
func TestTokenOfV010IsRefused(t *testing.T) {
	tok, rec := NewToken("admin", 0)
	if !rec.GetProven() {
		t.Fatal("a new token record is not marked proven")
	}
	old := proto.CloneOf(rec)
	old.Proven = false
	for _, c := range []struct {
		rec     *fsmpb.AuthToken
		refused bool
	}{{rec, false}, {old, true}} {
		pol := Compile(&fsmpb.AuthState{Enabled: true, Tokens: []*fsmpb.AuthToken{c.rec}})
		name, err := pol.Authenticate(tok)
		if c.refused {
			if !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "auth token create") || name != "" {
				t.Errorf("unproven record: Authenticate = %q, %v; want denied, naming how to mint a new one", name, err)
			}
		} else if err != nil || name != "admin" {
			t.Errorf("proven record: Authenticate = %q, %v", name, err)
		}
	}
}

func BenchmarkAllow(b *testing.B) {
	var off *Policies
	on := Compile(&fsmpb.AuthState{Enabled: true, Policies: []*fsmpb.AuthPolicy{
		{Name: "a", Principals: []string{"alice"}, Permissions: []string{"lock"}, Prefixes: []string{"report:", "job:"}},
	}})
	alice := Principal{Name: "alice"}
	b.Run("off", func(b *testing.B) {
		for b.Loop() {
			if !off.Allow(alice, PermLock, "job:1") {
				b.Fatal("denied")
			}
		}
	})
	b.Run("on", func(b *testing.B) {
		for b.Loop() {
			if !on.Allow(alice, PermLock, "job:1") {
				b.Fatal("denied")
			}
		}
	})
}
