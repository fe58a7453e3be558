package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/sequencer"
)

// TestCertsAndTLS: the CA helper makes the files, serve speaks mutual TLS with them, the CLI
// verifies the server and presents a client certificate (by flags and by environment), and a
// plaintext or certificate-less CLI fails with a clear message.
func TestCertsAndTLS(t *testing.T) {
	certsDir := filepath.Join(t.TempDir(), "certs")
	for _, args := range [][]string{
		{"certs", "create-ca"},
		{"certs", "create-node", "--host", "127.0.0.1", "--host", "localhost"},
		{"certs", "create-client", "alice"},
	} {
		out := ok[struct {
			Files []string `json:"files"`
		}](t, cli(t, append(args, "--certs-dir", certsDir, "-o", "json")...))
		if len(out.Files) != 2 {
			t.Fatalf("%v wrote %v", args, out.Files)
		}
	}
	fails(t, cli(t, "certs", "create-ca", "--certs-dir", certsDir, "-o", "json"), "invalid-argument", 2)
	if fi, err := os.Stat(filepath.Join(certsDir, "client.alice.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("client key: %v %v", fi, err)
	}

	f := func(name string) string { return filepath.Join(certsDir, name) }
	srv := startServeAt(t, t.TempDir(), "", "--cert", f("node.crt"), "--key", f("node.key"), "--client-ca", f("ca.crt"))
	tlsArgs := []string{"--cacert", f("ca.crt"), "--cert", f("client.alice.crt"), "--key", f("client.alice.key")}

	h := ok[holdingOut](t, cli(t, append([]string{"acquire", "tls:lock", "--endpoints", "https://" + srv.Addr, "-o", "json"}, tlsArgs...)...))
	if h.Token == 0 {
		t.Fatalf("acquire over TLS: %+v", h)
	}
	// The same through the environment, with a bare host:port endpoint.
	r := cliEnv(t, []string{"LEASEHOLD_CACERT=" + f("ca.crt"), "LEASEHOLD_CERT=" + f("client.alice.crt"), "LEASEHOLD_KEY=" + f("client.alice.key")},
		"status", "tls:lock", "--endpoints", srv.Addr, "-o", "json")
	if r.code != 0 || !strings.Contains(r.stdout, "tls:lock") {
		t.Fatalf("status with TLS from the environment: %v", r)
	}

	e := fails(t, cli(t, "ls", "--endpoints", srv.Addr, "-o", "json"), "unavailable", api.CodeUnavailable.ExitCode())
	if !strings.Contains(e.Error.Message, "the server speaks TLS: use an https://") {
		t.Fatalf("plaintext CLI against TLS: %q", e.Error.Message)
	}
	e = fails(t, cli(t, "ls", "--endpoints", srv.Addr, "--cacert", f("ca.crt"), "-o", "json"), "unavailable", api.CodeUnavailable.ExitCode())
	// TLS 1.3 reports the refusal as an alert ("certificate required") or
	// only as a closed connection (then the hint names the certificate).
	if !strings.Contains(e.Error.Message, "requires a client certificate") {
		t.Fatalf("CLI without a client certificate against mTLS: %q", e.Error.Message)
	}
	if !strings.Contains(srv.log.String(), "client didn't provide a certificate") {
		t.Errorf("serve did not log the refused handshake:\n%s", srv.log.String())
	}
}

// TestServeRefusesPlaintextOnNetwork: serve on a non-loopback address without TLS stops at
// once with one line naming the fix, before it binds anything.
func TestServeRefusesPlaintextOnNetwork(t *testing.T) {
	r := cli(t, "serve", "--listen", "0.0.0.0:7420", "--data", t.TempDir())
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if r.code != 2 || len(lines) != 1 || !strings.Contains(lines[0], "refusing to serve 0.0.0.0:7420 without TLS") ||
		!strings.Contains(lines[0], "--insecure") {
		t.Fatalf("want exit 2 and one line naming --cert/--key and --insecure; got %v", r)
	}
	r = cli(t, "serve", "--listen", "127.0.0.1:0", "--client-ca", "ca.crt", "--data", t.TempDir())
	if r.code != 2 || !strings.Contains(r.stderr, "--client-ca needs --cert and --key") {
		t.Fatalf("--client-ca alone: %v", r)
	}
}

// TestSequencerKeyServe: certs create-sequencer-key writes the signer file and key set, and
// serve --sequencer-key publishes that key set at GET /v1/keys.
func TestSequencerKeyServe(t *testing.T) {
	dir := t.TempDir()
	ok[struct{}](t, cli(t, "certs", "create-sequencer-key", "--cluster-id", "prod-1", "--certs-dir", dir, "-o", "json"))
	fails(t, cli(t, "certs", "create-sequencer-key", "--cluster-id", "prod-1", "--certs-dir", dir, "-o", "json"), "invalid-argument", 2)
	ok[struct{}](t, cli(t, "certs", "create-sequencer-key", "--rotate", "--key-id", "k2", "--certs-dir", dir, "-o", "json"))
	srv := startServeAt(t, t.TempDir(), "", "--sequencer-key", filepath.Join(dir, "sequencer.key"))
	resp, err := http.Get("http://" + srv.Addr + "/v1/keys")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		ClusterID string `json:"cluster_id"`
		Keys      []struct {
			ID string `json:"id"`
		} `json:"keys"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/keys: %d %v", resp.StatusCode, err)
	}
	if got.ClusterID != "prod-1" || len(got.Keys) != 2 || got.Keys[1].ID != "k2" {
		t.Fatalf("key set %+v, want prod-1 with k1 and k2", got)
	}
	ks, err := sequencer.ReadKeySetFile(filepath.Join(dir, "sequencer-keys.json"))
	if err != nil || ks.ClusterID != "prod-1" {
		t.Fatalf("sequencer-keys.json: %+v %v", ks, err)
	}
	v, err := sequencer.NewVerifier(ks)
	if err != nil {
		t.Fatal(err)
	}

	// acquire --sequencer prints a sequencer the pinned key set verifies; run exports it.
	h := ok[struct {
		Token     uint64 `json:"token"`
		Sequencer string `json:"sequencer"`
	}](t, srv.cli(t, "acquire", "seq:a", "--sequencer", "-o", "json"))
	if q, err := v.VerifyString(h.Sequencer, "seq:a"); err != nil || q.Token != h.Token {
		t.Fatalf("acquire --sequencer: %+v, %v", q, err)
	}
	r := srv.cli(t, "run", "seq:b", "--sequencer", "--", "sh", "-c", "printf %s \"$LEASEHOLD_SEQUENCER\"")
	if _, err := v.VerifyString(r.stdout, "seq:b"); r.code != 0 || err != nil {
		t.Fatalf("run --sequencer: LEASEHOLD_SEQUENCER=%q: %v (%v)", r.stdout, err, r)
	}
	if p := ok[holdingOut](t, srv.cli(t, "acquire", "seq:c", "-o", "json")); strings.Contains(srv.log.String(), "cannot sign") || p.Token == 0 {
		t.Fatalf("plain acquire: %+v", p)
	}
}
