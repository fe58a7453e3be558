package gateway_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/gateway"
	"github.com/leasehold/leasehold/sequencer"
)

func signer(t *testing.T, cluster string, seed byte, id string) *sequencer.Signer {
	t.Helper()
	k, err := sequencer.GenerateKey(bytes.NewReader(bytes.Repeat([]byte{seed}, 32)), id, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	s, err := sequencer.NewSigner(cluster, k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func writeKeySet(t *testing.T, path string, ks sequencer.KeySet) {
	t.Helper()
	b, err := json.Marshal(ks)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func sign(t *testing.T, s *sequencer.Signer, lock string, token uint64) string {
	t.Helper()
	text, err := s.SignString(sequencer.Sequencer{Name: lock, Token: token, IssuedUnixMs: 1})
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// TestGatewaySequencers: a forged sequencer with a huge token, or a genuine one for another
// lock, is refused before the token is recorded, so the honest holder keeps writing.
func TestGatewaySequencers(t *testing.T) {
	u := newUpstream(t)
	cl := signer(t, "c1", 1, "k1")
	keys := filepath.Join(t.TempDir(), "keys.json")
	writeKeySet(t, keys, cl.KeySet())
	cfg := config(t, u, "")
	cfg.Sequencers = &gateway.SequencerConfig{KeySetFile: keys, Locks: map[string]string{"payments:stream-1": "lock:stream-1"}}
	tg := startGateway(t, cfg)
	const key, lock = "payments:stream-1", "lock:stream-1"
	seqCharge := func(seq string, extra ...string) response {
		return tg.send(t, http.MethodPost, "/charge", append([]string{"Fencing-Key", key, fence.DefaultSequencerHeader, seq}, extra...)...)
	}

	forger := signer(t, "c1", 2, "k1")
	for name, r := range map[string]response{
		"forged":          seqCharge(sign(t, forger, lock, 1<<64-1)),
		"another lock":    seqCharge(sign(t, cl, "lock:stream-2", 1<<64-1)),
		"another cluster": seqCharge(sign(t, signer(t, "c2", 1, "k1"), lock, 1<<64-1)),
		"unconfigured key": tg.send(t, http.MethodPost, "/charge", "Fencing-Key", "payments:stream-9",
			fence.DefaultSequencerHeader, sign(t, cl, "payments:stream-9", 1<<64-1)),
	} {
		if r.status != http.StatusForbidden || r.err.Code != fence.CodePermissionDenied {
			t.Errorf("%s: %d %+v, want 403 permission-denied", name, r.status, r.err)
		}
	}
	if r := charge(t, tg, key, "18446744073709551615"); r.status != http.StatusBadRequest {
		t.Errorf("bare token in verifying mode: %d %+v, want 400", r.status, r.err)
	}
	if u.count() != 0 {
		t.Fatalf("refused requests reached the upstream: %d", u.count())
	}
	if last, err := tg.g.LastToken(t.Context(), key); err != nil || last != 0 {
		t.Fatalf("last token after refusals = %d, %v; want 0", last, err)
	}
	if r := seqCharge(sign(t, cl, lock, 18)); r.status != http.StatusOK {
		t.Fatalf("honest holder: %d %s", r.status, r.body)
	}
	if r := seqCharge(sign(t, cl, lock, 17)); r.status != http.StatusConflict || r.err.LastToken != 18 {
		t.Fatalf("stale holder: %d %+v", r.status, r.err)
	}
	u.mu.Lock()
	got := u.requests
	u.mu.Unlock()
	if len(got) != 1 || got[0] != "POST /charge "+key+" 18" {
		t.Fatalf("upstream saw %q, want one charge with the verified token 18", got)
	}

	// Rotation: a new key is refused until the key set file is reloaded.
	k2, _ := sequencer.GenerateKey(bytes.NewReader(bytes.Repeat([]byte{5}, 32)), "k2", time.Unix(0, 0))
	if err := cl.Rotate(k2); err != nil {
		t.Fatal(err)
	}
	if r := seqCharge(sign(t, cl, lock, 19)); r.status != http.StatusForbidden {
		t.Fatalf("unpinned key: %d", r.status)
	}
	writeKeySet(t, keys, cl.KeySet())
	if err := tg.g.ReloadKeySet(); err != nil {
		t.Fatal(err)
	}
	if r := seqCharge(sign(t, cl, lock, 19)); r.status != http.StatusOK {
		t.Fatalf("after reload: %d %s", r.status, r.body)
	}
}

func TestGatewaySequencerConfig(t *testing.T) {
	u := newUpstream(t)
	keys := filepath.Join(t.TempDir(), "keys.json")
	for name, sc := range map[string]*gateway.SequencerConfig{
		"no key set": {LockIsKey: true},
		"no locks":   {KeySetFile: keys},
		"bad header": {KeySetFile: keys, LockIsKey: true, Header: "a b"},
		"empty lock": {KeySetFile: keys, Locks: map[string]string{"k": ""}},
	} {
		cfg := config(t, u, "")
		cfg.Sequencers = sc
		if err := cfg.Validate(); !errors.Is(err, gateway.ErrInvalidConfig) {
			t.Errorf("%s: Validate = %v", name, err)
		}
	}
	cfg := config(t, u, "")
	cfg.Sequencers = &gateway.SequencerConfig{KeySetFile: keys, LockIsKey: true}
	if _, err := gateway.New(cfg); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing key set file: %v", err)
	}
	if err := os.WriteFile(keys, []byte(`{"cluster_id":"c1","keys":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := gateway.New(cfg); !errors.Is(err, sequencer.ErrInvalidKeySet) {
		t.Fatalf("empty key set: %v", err)
	}
	m, err := gateway.ParseLocks([]string{"a=b", "x=y=z"})
	if err != nil || m["a"] != "b" || m["x=y"] != "z" {
		t.Fatalf("ParseLocks = %v, %v", m, err)
	}
	for _, bad := range [][]string{{"a"}, {"=b"}, {"a="}, {"a=b", "a=c"}} {
		if _, err := gateway.ParseLocks(bad); !errors.Is(err, gateway.ErrInvalidConfig) {
			t.Errorf("ParseLocks(%q) = %v", bad, err)
		}
	}
}
