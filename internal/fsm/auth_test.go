package fsm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

func authCmd(op any) *fsmpb.Command {
	switch o := op.(type) {
	case *fsmpb.AuthEnable:
		return &fsmpb.Command{Op: &fsmpb.Command_AuthEnable{AuthEnable: o}}
	case *fsmpb.AuthPutPolicy:
		return &fsmpb.Command{Op: &fsmpb.Command_AuthPutPolicy{AuthPutPolicy: o}}
	case *fsmpb.AuthDeletePolicy:
		return &fsmpb.Command{Op: &fsmpb.Command_AuthDeletePolicy{AuthDeletePolicy: o}}
	case *fsmpb.AuthPutToken:
		return &fsmpb.Command{Op: &fsmpb.Command_AuthPutToken{AuthPutToken: o}}
	case *fsmpb.AuthRevokeToken:
		return &fsmpb.Command{Op: &fsmpb.Command_AuthRevokeToken{AuthRevokeToken: o}}
	}
	panic("authCmd")
}

// TestAuthState: the auth commands build the policies every node checks,
// a session records its principal, and both survive snapshot and restore
// with tokens only as their SHA-256.
func TestAuthState(t *testing.T) {
	m := New(DefaultLimits())
	var idx uint64
	apply := func(c *fsmpb.Command) Result { idx++; return m.Apply(idx, c) }
	if m.Auth().On() {
		t.Fatal("a new state has auth on")
	}
	tok, rec := auth.NewToken("alice", 1)
	for _, c := range []*fsmpb.Command{
		authCmd(&fsmpb.AuthPutToken{Token: rec}),
		authCmd(&fsmpb.AuthPutPolicy{Policy: &fsmpb.AuthPolicy{Name: "p", Principals: []string{"alice"}, Permissions: []string{"lock"}, Prefixes: []string{"job:"}}}),
		authCmd(&fsmpb.AuthEnable{Enabled: true}),
	} {
		if res := apply(c); res.Err != nil || res.Auth == nil {
			t.Fatalf("apply %v: %+v", c, res)
		}
	}
	if res := apply(authCmd(&fsmpb.AuthPutPolicy{Policy: &fsmpb.AuthPolicy{Name: "bad", Principals: []string{"alice"}, Permissions: []string{"root"}}})); !errors.Is(res.Err, auth.ErrInvalid) {
		t.Fatalf("a policy with an unknown permission: %v", res.Err)
	}
	if res := apply(authCmd(&fsmpb.AuthRevokeToken{Id: "nope"})); !errors.Is(res.Err, ErrAuthNotFound) {
		t.Fatalf("revoke of an unknown token: %v", res.Err)
	}
	apply(&fsmpb.Command{Op: &fsmpb.Command_CreateSession{CreateSession: &fsmpb.CreateSession{LeaseId: "L1", TtlMs: 1000, Principal: "alice"}}})

	check := func(m *Machine) {
		t.Helper()
		pol := m.Auth()
		alice := auth.Principal{Name: "alice"}
		if !pol.On() || !pol.Allow(alice, auth.PermLock, "job:1") || pol.Allow(alice, auth.PermLock, "other") || pol.Allow(alice, auth.PermRead, "job:1") {
			t.Fatal("policies not as set")
		}
		if name, err := pol.Authenticate(tok); err != nil || name != "alice" {
			t.Fatalf("authenticate: %q %v", name, err)
		}
		if p, ok := m.SessionPrincipal("L1"); !ok || p != "alice" {
			t.Fatalf("session principal %q %v", p, ok)
		}
	}
	check(m)
	snap, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(snap, []byte(tok)) {
		t.Fatal("the snapshot holds the token")
	}
	m2 := New(DefaultLimits())
	if err := m2.Restore(snap); err != nil {
		t.Fatal(err)
	}
	check(m2)

	// Revoke: the token no longer authenticates.
	if res := apply(authCmd(&fsmpb.AuthRevokeToken{Id: rec.GetId()})); res.Err != nil {
		t.Fatal(res.Err)
	}
	if _, err := m.Auth().Authenticate(tok); !errors.Is(err, auth.ErrDenied) {
		t.Fatalf("revoked token: %v", err)
	}
}

// TestSnapshotWithoutAuthUnchanged: a state that never used auth has no
// auth record, so its snapshot bytes are those of earlier versions.
func TestSnapshotWithoutAuthUnchanged(t *testing.T) {
	m := New(DefaultLimits())
	m.Apply(1, &fsmpb.Command{Op: &fsmpb.Command_CreateSession{CreateSession: &fsmpb.CreateSession{LeaseId: "L1", TtlMs: 1000}}})
	if m.authRecord() != nil {
		t.Fatal("an auth record without auth")
	}
}
