package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestAuthCLI: the bootstrap path through the CLI, as the README writes
// it. While auth is off, tokens and policies are minted only by the
// --admin principal proven by its client certificate (not by an anonymous
// caller, not for the --admin principal), and only it enables auth; then a
// token's principal may do what its policy grants and nothing else, and
// the server logs the denial for audit.
func TestAuthCLI(t *testing.T) {
	certsDir := filepath.Join(t.TempDir(), "certs")
	for _, args := range [][]string{
		{"certs", "create-ca"},
		{"certs", "create-node", "--host", "127.0.0.1"},
		{"certs", "create-client", "ops"},
	} {
		ok[map[string]any](t, cli(t, append(args, "--certs-dir", certsDir, "-o", "json")...))
	}
	f := func(name string) string { return filepath.Join(certsDir, name) }
	p := startServeAt(t, t.TempDir(), "", "--cert", f("node.crt"), "--key", f("node.key"), "--client-ca", f("ca.crt"), "--admin", "ops")
	asOps := func(args ...string) result {
		return cli(t, slices.Concat(args, []string{"--endpoints", "https://" + p.Addr, "--cacert", f("ca.crt"), "--cert", f("client.ops.crt"), "--key", f("client.ops.key")})...)
	}
	// Another client of the CA: the certificate of a principal that is not --admin.
	ok[map[string]any](t, cli(t, "certs", "create-client", "mallory", "--certs-dir", certsDir, "-o", "json"))
	asMallory := func(args ...string) result {
		return cli(t, slices.Concat(args, []string{"--endpoints", "https://" + p.Addr, "--cacert", f("ca.crt"), "--cert", f("client.mallory.crt"), "--key", f("client.mallory.key")})...)
	}
	asToken := func(tok string, args ...string) result {
		return asMallory(slices.Concat([]string{"--auth-token-file", tok}, args)...)
	}
	fails(t, asMallory("auth", "token", "create", "ops", "-o", "json"), "permission-denied", 10)
	fails(t, asMallory("auth", "policy", "set", "m", "--principal", "mallory", "--allow", "admin", "-o", "json"), "permission-denied", 10)
	dir := t.TempDir()
	tokenFile := func(who string) string {
		out := ok[struct {
			ID, Principal, Token string
		}](t, asOps("auth", "token", "create", who, "-o", "json"))
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
	ok[map[string]any](t, asOps("auth", "policy", "set", "ci", "--principal", "ci", "--allow", "lock,read", "--prefix", "deploy:", "-o", "json"))
	fails(t, asMallory("auth", "enable", "-o", "json"), "permission-denied", 10)
	fails(t, asToken(ops, "auth", "enable", "-o", "json"), "permission-denied", 10)
	ok[map[string]any](t, asOps("auth", "enable", "-o", "json"))

	st := ok[struct {
		Enabled   bool
		Principal string
		Roles     []string
	}](t, asToken(ci, "auth", "status", "-o", "json"))
	if !st.Enabled || st.Principal != "ci" || len(st.Roles) != 0 {
		t.Fatalf("auth status as ci: %+v", st)
	}
	ok[map[string]any](t, asToken(ci, "acquire", "deploy:prod", "-o", "json"))
	fails(t, asToken(ci, "acquire", "other", "-o", "json"), "permission-denied", 10)
	fails(t, asMallory("ls", "-o", "json"), "permission-denied", 10)
	fails(t, asToken(ci, "cluster", "bump-token", "1000", "-o", "json"), "permission-denied", 10)
	list := ok[struct{ Tokens []map[string]any }](t, asToken(ops, "auth", "token", "list", "-o", "json"))
	if len(list.Tokens) != 2 {
		t.Fatalf("token list: %+v", list)
	}
	eventually(t, 30*time.Second, "audit line", func() bool {
		return strings.Contains(p.log.String(), "component=audit action=BumpToken principal=ci result=denied")
	})
}

// TestAuthCLINodeSecret: a cluster without client certificates is
// bootstrapped through the CLI with --node-secret-file (or its env
// variable): only the node secret mints the first token and turns auth on.
func TestAuthCLINodeSecret(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "node.secret")
	if err := os.WriteFile(secret, []byte(strings.Repeat("5e", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServeAt(t, t.TempDir(), "", "--node-secret-file", secret, "--admin", "ops")
	fails(t, p.cli(t, "auth", "token", "create", "ops", "-o", "json"), "permission-denied", 10)
	tok := ok[struct{ Token string }](t, p.cli(t, "--node-secret-file", secret, "auth", "token", "create", "ops", "-o", "json"))
	tokFile := filepath.Join(dir, "ops.token")
	if err := os.WriteFile(tokFile, []byte(tok.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fails(t, p.cli(t, "--auth-token-file", tokFile, "auth", "enable", "-o", "json"), "permission-denied", 10)
	ok[map[string]any](t, cliEnv(t, []string{"LEASEHOLD_NODE_SECRET_FILE=" + secret}, "auth", "enable", "--endpoints", p.Addr, "-o", "json"))
	st := ok[struct {
		Enabled   bool
		Principal string
	}](t, p.cli(t, "--auth-token-file", tokFile, "auth", "status", "-o", "json"))
	if !st.Enabled || st.Principal != "ops" {
		t.Fatalf("auth status with the minted token: %+v", st)
	}
	short := filepath.Join(dir, "short.secret")
	if err := os.WriteFile(short, []byte("too short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fails(t, p.cli(t, "--node-secret-file", short, "auth", "status", "-o", "json"), "invalid-argument", 2)
}
