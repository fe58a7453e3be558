package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAuthCLI: the bootstrap path through the CLI. While auth is off,
// tokens and a policy are made; enabling is refused to a caller that would
// not be an admin; then a token's principal may do what its policy grants
// and nothing else, and the server logs the denial for audit.
func TestAuthCLI(t *testing.T) {
	p := startServeAt(t, t.TempDir(), "", "--admin", "ops")
	dir := t.TempDir()
	tokenFile := func(who string) string {
		out := ok[struct {
			ID, Principal, Token string
		}](t, p.cli(t, "auth", "token", "create", who, "-o", "json"))
		if out.Principal != who || !strings.HasPrefix(out.Token, "lh.") {
			t.Fatalf("token create %s: %+v", who, out)
		}
		f := filepath.Join(dir, who+".token")
		if err := os.WriteFile(f, []byte(out.Token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	ops, ci := tokenFile("ops"), tokenFile("ci")
	ok[map[string]any](t, p.cli(t, "--auth-token-file", ops, "auth", "policy", "set", "ci", "--principal", "ci", "--allow", "lock,read", "--prefix", "deploy:", "-o", "json"))
	fails(t, p.cli(t, "auth", "enable", "-o", "json"), "invalid-argument", 2)
	ok[map[string]any](t, p.cli(t, "--auth-token-file", ops, "auth", "enable", "-o", "json"))

	st := ok[struct {
		Enabled   bool
		Principal string
		Roles     []string
	}](t, p.cli(t, "--auth-token-file", ci, "auth", "status", "-o", "json"))
	if !st.Enabled || st.Principal != "ci" || len(st.Roles) != 0 {
		t.Fatalf("auth status as ci: %+v", st)
	}
	ok[map[string]any](t, p.cli(t, "--auth-token-file", ci, "acquire", "deploy:prod", "-o", "json"))
	fails(t, p.cli(t, "--auth-token-file", ci, "acquire", "other", "-o", "json"), "permission-denied", 10)
	fails(t, p.cli(t, "ls", "-o", "json"), "permission-denied", 10)
	fails(t, p.cli(t, "--auth-token-file", ci, "cluster", "bump-token", "1000", "-o", "json"), "permission-denied", 10)
	list := ok[struct{ Tokens []map[string]any }](t, p.cli(t, "--auth-token-file", ops, "auth", "token", "list", "-o", "json"))
	if len(list.Tokens) != 2 {
		t.Fatalf("token list: %+v", list)
	}
	eventually(t, 30*time.Second, "audit line", func() bool {
		return strings.Contains(p.log.String(), "component=audit action=BumpToken principal=ci result=denied")
	})
}
