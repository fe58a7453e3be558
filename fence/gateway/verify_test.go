package gateway_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
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
	return signGrant(t, s, sequencer.Sequencer{Name: lock, Token: token})
}

// signGrant signs q, issued at 1 ms, in text form.
func signGrant(t *testing.T, s *sequencer.Signer, q sequencer.Sequencer) string {
	t.Helper()
	q.IssuedUnixMs = 1
	text, err := s.SignString(q)
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// verifyingGateway starts a gateway in verifying mode with sc, trusting the key set of the
// signer cl (cluster c1, key k1) written to keys.
func verifyingGateway(t *testing.T, sc gateway.SequencerConfig) (u *upstream, cl *sequencer.Signer, keys string, tg *testGateway) {
	t.Helper()
	u = newUpstream(t)
	cl = signer(t, "c1", 1, "k1")
	keys = filepath.Join(t.TempDir(), "keys.json")
	writeKeySet(t, keys, cl.KeySet())
	cfg := config(t, u, "")
	sc.KeySetFile = keys
	cfg.Sequencers = &sc
	return u, cl, keys, startGateway(t, cfg)
}

// TestGatewaySequencers: a forged sequencer with a huge token, or a genuine one for another
// lock, is refused before the token is recorded, so the honest holder keeps writing.
func TestGatewaySequencers(t *testing.T) {
	u, cl, keys, tg := verifyingGateway(t, gateway.SequencerConfig{Locks: map[string]string{"payments:stream-1": "lock:stream-1"}})
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

// TestGatewaySequencerModeAndSlot: in verifying mode a reader's sequencer of the key's
// read/write lock cannot write (403), nor a semaphore slot's sequencer another slot's key; a
// sequencer of the old version 1, which carries neither, is refused as such (400).
func TestGatewaySequencerModeAndSlot(t *testing.T) {
	u, cl, _, tg := verifyingGateway(t, gateway.SequencerConfig{Locks: map[string]string{"k": "rw"}, LockIsKey: true})
	seq := func(q sequencer.Sequencer) string { return signGrant(t, cl, q) }
	write := func(key, seq string) response {
		return tg.send(t, http.MethodPost, "/charge", "Fencing-Key", key, fence.DefaultSequencerHeader, seq)
	}
	reader := seq(sequencer.Sequencer{Name: "rw", Token: 30, Mode: sequencer.Shared})
	if r := write("k", reader); r.status != http.StatusForbidden || !strings.Contains(r.err.Message, "only its exclusive holder may write") {
		t.Fatalf("a reader's write: %d %+v, want 403", r.status, r.err)
	}
	if r := write("enc/slot/2", seq(sequencer.Sequencer{Name: "enc", Token: 31})); r.status != http.StatusForbidden || !strings.Contains(r.err.Message, "slot 2's") {
		t.Fatalf("slot 0's write to slot 2's key: %d %+v, want 403", r.status, r.err)
	}
	// Version 1: the same fields without mode and slot, signed as that version was.
	b, err := sequencer.DecodeString(seq(sequencer.Sequencer{Name: "rw", Token: 32}))
	if err != nil {
		t.Fatal(err)
	}
	k := privateKey(t, 1)
	body := append([]byte{1}, b[1:len(b)-sequencer.SignatureLen-5]...)
	v1 := sequencer.EncodeToString(append(body, ed25519.Sign(k, append([]byte("leasehold-sequencer\x00"), body...))...))
	if r := write("k", v1); r.status != http.StatusBadRequest || !strings.Contains(r.err.Message, "version 1") {
		t.Fatalf("a version-1 sequencer: %d %+v, want 400 naming the version", r.status, r.err)
	}
	if u.count() != 0 {
		t.Fatalf("refused requests reached the upstream: %d", u.count())
	}
	if r := write("k", seq(sequencer.Sequencer{Name: "rw", Token: 33})); r.status != http.StatusOK {
		t.Fatalf("the writer: %d %s", r.status, r.body)
	}
	if r := write("enc/slot/2", seq(sequencer.Sequencer{Name: "enc", Token: 34, Slot: 2})); r.status != http.StatusOK {
		t.Fatalf("slot 2's holder: %d %s", r.status, r.body)
	}
}

// privateKey is the Ed25519 key signer(t, _, seed, _) signs with.
func privateKey(t *testing.T, seed byte) ed25519.PrivateKey {
	t.Helper()
	k, err := sequencer.GenerateKey(bytes.NewReader(bytes.Repeat([]byte{seed}, 32)), "k1", time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	return k.Key
}
