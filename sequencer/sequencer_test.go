package sequencer_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/sequencer"
)

// seededKey returns a deterministic key for tests.
func seededKey(t testing.TB, id string, seed byte) sequencer.PrivateKey {
	t.Helper()
	k, err := sequencer.GenerateKey(bytes.NewReader(bytes.Repeat([]byte{seed}, 32)), id, time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newSigner(t testing.TB, cluster string, keys ...sequencer.PrivateKey) *sequencer.Signer {
	t.Helper()
	s, err := sequencer.NewSigner(cluster, keys...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newVerifier(t testing.TB, ks sequencer.KeySet) *sequencer.Verifier {
	t.Helper()
	v, err := sequencer.NewVerifier(ks)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

var grant = sequencer.Sequencer{
	Name: "report:417:rebuild", Token: 42, LeaseID: "0123456789abcdef0123456789abcdef",
	IssuedUnixMs: time.Date(2026, 11, 30, 12, 30, 0, 0, time.UTC).UnixMilli(), Group: "g0",
}

func TestSignVerifyRoundTrip(t *testing.T) {
	s := newSigner(t, "c1", seededKey(t, "k1", 1))
	b, err := s.Sign(grant)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > sequencer.MaxLen {
		t.Fatalf("encoded %d bytes > MaxLen %d", len(b), sequencer.MaxLen)
	}
	v := newVerifier(t, s.KeySet())
	got, err := v.Verify(b, grant.Name)
	if err != nil {
		t.Fatal(err)
	}
	want := grant
	want.ClusterID, want.KeyID = "c1", "k1"
	if got != want {
		t.Fatalf("verified %+v, want %+v", got, want)
	}
	text := sequencer.EncodeToString(b)
	if strings.ContainsAny(text, "+/=") {
		t.Fatalf("text form %q is not unpadded base64url", text)
	}
	got2, err := v.VerifyString(text, grant.Name)
	if err != nil || got2 != want {
		t.Fatalf("VerifyString = %+v, %v", got2, err)
	}
	// Canonical: encoding the decoded sequencer again gives the same bytes.
	b2, err := s.Sign(got)
	if err != nil || !bytes.Equal(b, b2) {
		t.Fatalf("re-signing the decoded sequencer changed its bytes (%v)", err)
	}
}

func TestVerifyRefuses(t *testing.T) {
	k1 := seededKey(t, "k1", 1)
	s := newSigner(t, "c1", k1)
	v := newVerifier(t, s.KeySet())
	good, err := s.Sign(grant)
	if err != nil {
		t.Fatal(err)
	}
	// Same key id, another private key: a forger who knows the key id.
	forger := newSigner(t, "c1", seededKey(t, "k1", 2))
	forged, _ := forger.Sign(sequencer.Sequencer{Name: grant.Name, Token: 1 << 62})
	// A genuine key that signed for another cluster.
	other, _ := newSigner(t, "c2", k1).Sign(grant)
	// A key the verifier does not know.
	unknown, _ := newSigner(t, "c1", seededKey(t, "k9", 9)).Sign(grant)

	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 1
		return b
	}
	tokenAt := bytes.Index(good, []byte(grant.Name)) + len(grant.Name) + 7 // low byte of the token
	for _, tc := range []struct {
		name string
		b    []byte
		lock string
		want error
	}{
		{"forged with a guessed key id", forged, grant.Name, sequencer.ErrBadSignature},
		{"token altered", flip(tokenAt), grant.Name, sequencer.ErrBadSignature},
		{"signature altered", flip(len(good) - 1), grant.Name, sequencer.ErrBadSignature},
		{"another lock", good, "report:418:rebuild", sequencer.ErrWrongLock},
		{"another cluster", other, grant.Name, sequencer.ErrWrongCluster},
		{"unknown key", unknown, grant.Name, sequencer.ErrUnknownKey},
		{"truncated", good[:len(good)-1], grant.Name, sequencer.ErrMalformed},
		{"trailing byte", append(bytes.Clone(good), 0), grant.Name, sequencer.ErrMalformed},
		{"empty", nil, grant.Name, sequencer.ErrMalformed},
		{"version 3", append([]byte{3}, good[1:]...), grant.Name, sequencer.ErrMalformed},
		{"version 1, genuinely signed", version1(t, k1, good), grant.Name, sequencer.ErrVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := v.Verify(tc.b, tc.lock)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %+v, %v; want %v", q, err, tc.want)
			}
			if q != (sequencer.Sequencer{}) {
				t.Fatalf("a refused sequencer returned fields %+v", q)
			}
		})
	}
}

func TestSignRefusesBadFields(t *testing.T) {
	s := newSigner(t, "c1", seededKey(t, "k1", 1))
	for _, tc := range []struct {
		name string
		q    sequencer.Sequencer
	}{
		{"token 0", sequencer.Sequencer{Name: "a"}},
		{"empty name", sequencer.Sequencer{Token: 1}},
		{"long name", sequencer.Sequencer{Name: strings.Repeat("a", sequencer.MaxNameLen+1), Token: 1}},
		{"control in name", sequencer.Sequencer{Name: "a\x00b", Token: 1}},
		{"invalid UTF-8", sequencer.Sequencer{Name: "a\xffb", Token: 1}},
		{"space in lease id", sequencer.Sequencer{Name: "a", Token: 1, LeaseID: "a b"}},
		{"long group", sequencer.Sequencer{Name: "a", Token: 1, Group: strings.Repeat("g", sequencer.MaxIDLen+1)}},
		{"negative time", sequencer.Sequencer{Name: "a", Token: 1, IssuedUnixMs: -1}},
	} {
		if b, err := s.Sign(tc.q); !errors.Is(err, sequencer.ErrMalformed) {
			t.Errorf("%s: Sign = %x, %v; want ErrMalformed", tc.name, b, err)
		}
	}
	// The longest valid sequencer fits MaxLen and MaxTextLen.
	long := sequencer.Sequencer{Name: strings.Repeat("n", sequencer.MaxNameLen), Token: ^uint64(0),
		LeaseID: strings.Repeat("l", sequencer.MaxIDLen), Group: strings.Repeat("g", sequencer.MaxIDLen), IssuedUnixMs: 1<<63 - 1}
	ls := newSigner(t, strings.Repeat("c", sequencer.MaxIDLen), seededKey(t, strings.Repeat("k", sequencer.MaxIDLen), 1))
	b, err := ls.Sign(long)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != sequencer.MaxLen || len(sequencer.EncodeToString(b)) != sequencer.MaxTextLen {
		t.Fatalf("longest sequencer: %d bytes, text %d; want MaxLen %d, MaxTextLen %d",
			len(b), len(sequencer.EncodeToString(b)), sequencer.MaxLen, sequencer.MaxTextLen)
	}
}

func TestDecodeStringIsCanonical(t *testing.T) {
	s := newSigner(t, "c1", seededKey(t, "k1", 1))
	text, err := s.SignString(grant)
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]string{
		"padding":           text + strings.Repeat("=", (4-len(text)%4)%4+4),
		"line break":        text[:10] + "\n" + text[10:],
		"carriage return":   text[:10] + "\r" + text[10:],
		"standard alphabet": text[:5] + "+" + text[6:],
		"too long":          strings.Repeat("A", sequencer.MaxTextLen+1),
	} {
		if b, err := sequencer.DecodeString(bad); !errors.Is(err, sequencer.ErrMalformed) {
			t.Errorf("%s: DecodeString = %x, %v; want ErrMalformed", name, b, err)
		}
	}
	// A second spelling of the same bytes (stray bits in the last character) is refused.
	last := strings.IndexByte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", text[len(text)-1])
	if len(text)%4 == 0 || last%4 != 0 {
		t.Fatalf("the test sequencer's text %q has no spare bits to set", text)
	}
	stray := text[:len(text)-1] + string("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[last+1])
	if b, err := sequencer.DecodeString(stray); !errors.Is(err, sequencer.ErrMalformed) {
		t.Errorf("stray bits: DecodeString = %x, %v; want ErrMalformed", b, err)
	}
}

func TestRotation(t *testing.T) {
	old, next := seededKey(t, "k1", 1), seededKey(t, "k2", 2)
	s := newSigner(t, "c1", old)
	before, _ := s.Sign(grant)
	if err := s.Rotate(next); err != nil {
		t.Fatal(err)
	}
	after, _ := s.Sign(grant)
	if q, _ := sequencer.Parse(after); q.KeyID != "k2" {
		t.Fatalf("after Rotate the key id is %q, want k2", q.KeyID)
	}
	// A verifier pinned to the old key set refuses the new key until it learns it.
	v := newVerifier(t, sequencer.KeySet{ClusterID: "c1", Keys: []sequencer.PublicKey{old.Public()}})
	if _, err := v.Verify(after, grant.Name); !errors.Is(err, sequencer.ErrUnknownKey) {
		t.Fatalf("new key before SetKeySet: %v, want ErrUnknownKey", err)
	}
	if err := v.SetKeySet(s.KeySet()); err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{before, after} {
		if _, err := v.Verify(b, grant.Name); err != nil {
			t.Fatalf("during the rotation both keys verify: %v", err)
		}
	}
	// Retiring the old key: sequencers it signed before not-after still verify, later ones not.
	retired := old.Public()
	retired.NotAfter = time.UnixMilli(grant.IssuedUnixMs)
	if err := v.SetKeySet(sequencer.KeySet{ClusterID: "c1", Keys: []sequencer.PublicKey{retired, next.Public()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(before, grant.Name); err != nil {
		t.Fatalf("issued at not-after: %v", err)
	}
	late := grant
	late.IssuedUnixMs++
	lateB, _ := newSigner(t, "c1", old).Sign(late)
	if _, err := v.Verify(lateB, grant.Name); !errors.Is(err, sequencer.ErrKeyRetired) {
		t.Fatalf("issued after not-after: %v, want ErrKeyRetired", err)
	}
	if err := s.Remove("k2"); !errors.Is(err, sequencer.ErrInvalidKeySet) {
		t.Fatalf("removing the signing key: %v", err)
	}
	if err := s.Remove("k1"); err != nil || len(s.KeySet().Keys) != 1 {
		t.Fatalf("Remove(k1) = %v, keys %v", err, s.KeySet().Keys)
	}
}

func TestKeySetFile(t *testing.T) {
	k1, k2 := seededKey(t, "k1", 1), seededKey(t, "k2", 2)
	k1.NotAfter = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	s := newSigner(t, "c1", k1, k2)
	data, err := json.MarshalIndent(s.KeySet(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ks, err := sequencer.ReadKeySetFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if ks.ClusterID != "c1" || len(ks.Keys) != 2 || !ks.Keys[0].NotAfter.Equal(k1.NotAfter) ||
		!ks.Keys[1].NotAfter.IsZero() || !ed25519.PublicKey(ks.Keys[1].Key).Equal(k2.Public().Key) {
		t.Fatalf("read back %+v from\n%s", ks, data)
	}
	b, _ := s.Sign(grant)
	if _, err := newVerifier(t, ks).Verify(b, grant.Name); err != nil {
		t.Fatalf("a verifier from the file refuses: %v", err)
	}

	for _, tc := range []struct{ name, json string }{
		{"no keys", `{"cluster_id":"c1","keys":[]}`},
		{"no cluster", `{"keys":[{"id":"k1","algorithm":"ed25519","public_key":"` + strings.Repeat("A", 43) + `","created":"2026-11-30T12:00:00Z"}]}`},
		{"other algorithm", `{"cluster_id":"c1","keys":[{"id":"k1","algorithm":"rsa","public_key":"` + strings.Repeat("A", 43) + `","created":"2026-11-30T12:00:00Z"}]}`},
		{"short key", `{"cluster_id":"c1","keys":[{"id":"k1","algorithm":"ed25519","public_key":"AAAA","created":"2026-11-30T12:00:00Z"}]}`},
		{"unknown field", `{"cluster_id":"c1","keyz":[]}`},
		{"repeated id", `{"cluster_id":"c1","keys":[{"id":"k1","algorithm":"ed25519","public_key":"` + strings.Repeat("A", 43) + `","created":"2026-11-30T12:00:00Z"},{"id":"k1","algorithm":"ed25519","public_key":"` + strings.Repeat("A", 43) + `","created":"2026-11-30T12:00:00Z"}]}`},
	} {
		var ks sequencer.KeySet
		if err := json.Unmarshal([]byte(tc.json), &ks); !errors.Is(err, sequencer.ErrInvalidKeySet) {
			t.Errorf("%s: Unmarshal = %v, want ErrInvalidKeySet", tc.name, err)
		}
	}
}

func TestVerifyRefusesOversizedText(t *testing.T) {
	// A verifier must refuse oversized input before decoding it.
	v := newVerifier(t, newSigner(t, "c1", seededKey(t, "k1", 1)).KeySet())
	if _, err := v.VerifyString(strings.Repeat("A", 1<<20), "x"); !errors.Is(err, sequencer.ErrMalformed) {
		t.Fatalf("1 MiB of text: %v", err)
	}
}

func TestSignerFile(t *testing.T) {
	s := newSigner(t, "c1", seededKey(t, "k1", 1), seededKey(t, "k2", 2))
	data, err := s.MarshalPrivate()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "signer.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	back, err := sequencer.ReadSignerFile(path)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := s.Sign(grant)
	b, _ := back.Sign(grant)
	if !bytes.Equal(a, b) {
		t.Fatal("the signer read back signs differently")
	}
	for _, bad := range []string{
		`{"cluster_id":"c1","keys":[]}`,
		`{"cluster_id":"c1","keys":[{"id":"k1","algorithm":"ed25519","private_key":"AAAA","created":"2026-11-30T12:00:00Z"}]}`,
		`{"cluster_id":"c1","keys":[{"id":"k1","algorithm":"rsa","private_key":"` + strings.Repeat("A", 43) + `","created":"2026-11-30T12:00:00Z"}]}`,
		`{"cluster_id":"c1","extra":1}`,
	} {
		if _, err := sequencer.ParseSigner([]byte(bad)); !errors.Is(err, sequencer.ErrInvalidKeySet) {
			t.Errorf("ParseSigner(%s) = %v", bad, err)
		}
	}
}

// version1 returns the version-1 form of the version-2 sequencer b, signed
// with k as a cluster of that version did: no mode, no slot.
func version1(t *testing.T, k sequencer.PrivateKey, b []byte) []byte {
	t.Helper()
	body := append([]byte{1}, b[1:len(b)-sequencer.SignatureLen-5]...)
	return append(body, ed25519.Sign(k.Key, append([]byte("leasehold-sequencer\x00"), body...))...)
}

// TestModeAndSlotSigned: mode and slot round-trip, and altering either breaks
// the signature, so a reader's grant cannot be made a writer's, nor one
// slot's another's.
func TestModeAndSlotSigned(t *testing.T) {
	k1 := seededKey(t, "k1", 1)
	s := newSigner(t, "c1", k1)
	v := newVerifier(t, s.KeySet())
	for _, tc := range []struct {
		q  sequencer.Sequencer
		at int // the byte altered, counted back from the signature
	}{
		{sequencer.Sequencer{Name: "rw", Token: 7, Mode: sequencer.Shared}, 5}, // the mode
		{sequencer.Sequencer{Name: "sem", Token: 8, Slot: 3}, 1},               // the slot's low byte
	} {
		q := tc.q
		b, err := s.Sign(q)
		if err != nil {
			t.Fatal(err)
		}
		got, err := v.Verify(b, q.Name)
		if err != nil || got.Mode != q.Mode || got.Slot != q.Slot {
			t.Fatalf("Verify = %+v, %v; want mode %v slot %d", got, err, q.Mode, q.Slot)
		}
		bad := bytes.Clone(b)
		bad[len(b)-sequencer.SignatureLen-tc.at] ^= 1
		if _, err := v.Verify(bad, q.Name); !errors.Is(err, sequencer.ErrBadSignature) {
			t.Fatalf("%v altered: %v, want a bad signature", q, err)
		}
	}
	if _, err := s.Sign(sequencer.Sequencer{Name: "rw", Token: 1, Mode: sequencer.Shared, Slot: 1}); !errors.Is(err, sequencer.ErrMalformed) {
		t.Fatalf("a shared grant in slot 1 signed: %v", err)
	}
	if _, err := s.Sign(sequencer.Sequencer{Name: "rw", Token: 1, Mode: 2}); !errors.Is(err, sequencer.ErrMalformed) {
		t.Fatalf("an unknown mode signed: %v", err)
	}
}
