package sequencer

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Algorithm is the only signature algorithm of version 1, as named in key set files.
const Algorithm = "ed25519"

// PrivateKey is one signing key of a cluster.
type PrivateKey struct {
	// ID names the key inside its cluster (1..MaxIDLen bytes of printable ASCII).
	ID string
	// Key is the Ed25519 private key.
	Key ed25519.PrivateKey
	// Created is when the key was made.
	Created time.Time
	// NotAfter, when not zero, is the last moment the key may sign.
	NotAfter time.Time
}

// GenerateKey returns a new signing key named id, made at created, reading randomness from
// rand (crypto/rand.Reader when nil).
func GenerateKey(rand io.Reader, id string, created time.Time) (PrivateKey, error) {
	if err := checkID("key id", id, true); err != nil {
		return PrivateKey{}, fmt.Errorf("%w: %v", ErrInvalidKeySet, err)
	}
	_, priv, err := ed25519.GenerateKey(rand)
	if err != nil {
		return PrivateKey{}, fmt.Errorf("sequencer: generate key: %w", err)
	}
	return PrivateKey{ID: id, Key: priv, Created: created.UTC()}, nil
}

// Public returns the key's public half, as published in a KeySet.
func (k PrivateKey) Public() PublicKey {
	return PublicKey{ID: k.ID, Key: k.Key.Public().(ed25519.PublicKey), Created: k.Created, NotAfter: k.NotAfter}
}

// PublicKey is one trusted verification key.
type PublicKey struct {
	// ID names the key inside its cluster.
	ID string
	// Key is the Ed25519 public key.
	Key ed25519.PublicKey
	// Created is when the key was made (informational).
	Created time.Time
	// NotAfter, when not zero, retires the key: it verifies only sequencers issued at or
	// before this time.
	NotAfter time.Time
}

// KeySet is the public keys of one cluster: what a resource pins to verify its sequencers.
type KeySet struct {
	ClusterID string
	Keys      []PublicKey
}

// Validate reports why ks cannot be used, wrapping ErrInvalidKeySet: an invalid cluster id, no
// keys, an invalid or repeated key id, a public key of the wrong size.
func (ks KeySet) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidKeySet, fmt.Sprintf(format, a...))
	}
	if err := checkID("cluster id", ks.ClusterID, true); err != nil {
		return bad("%v", err)
	}
	if len(ks.Keys) == 0 {
		return bad("no keys")
	}
	seen := map[string]bool{}
	for _, k := range ks.Keys {
		if err := checkID("key id", k.ID, true); err != nil {
			return bad("%v", err)
		}
		if seen[k.ID] {
			return bad("key id %q appears twice", k.ID)
		}
		seen[k.ID] = true
		if len(k.Key) != ed25519.PublicKeySize {
			return bad("key %q: public key is %d bytes, want %d", k.ID, len(k.Key), ed25519.PublicKeySize)
		}
	}
	return nil
}

// keySetJSON is the key set file format.
type keySetJSON struct {
	ClusterID string    `json:"cluster_id"`
	Keys      []keyJSON `json:"keys"`
}

type keyJSON struct {
	ID        string     `json:"id"`
	Algorithm string     `json:"algorithm"`
	PublicKey string     `json:"public_key"` // unpadded base64url of the 32-byte key
	Created   time.Time  `json:"created"`
	NotAfter  *time.Time `json:"not_after,omitempty"`
}

// MarshalJSON returns the key set file form:
//
//	{"cluster_id": "...", "keys": [{"id": "k1", "algorithm": "ed25519",
//	  "public_key": "<unpadded base64url>", "created": "<RFC 3339>", "not_after": "<RFC 3339, optional>"}]}
func (ks KeySet) MarshalJSON() ([]byte, error) {
	out := keySetJSON{ClusterID: ks.ClusterID, Keys: make([]keyJSON, 0, len(ks.Keys))}
	for _, k := range ks.Keys {
		kj := keyJSON{ID: k.ID, Algorithm: Algorithm, PublicKey: base64.RawURLEncoding.EncodeToString(k.Key), Created: k.Created.UTC()}
		if !k.NotAfter.IsZero() {
			na := k.NotAfter.UTC()
			kj.NotAfter = &na
		}
		out.Keys = append(out.Keys, kj)
	}
	return json.Marshal(out)
}

// UnmarshalJSON parses the key set file form strictly (unknown fields, another algorithm, a
// malformed key are errors) and validates the result.
func (ks *KeySet) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var in keySetJSON
	if err := dec.Decode(&in); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidKeySet, err)
	}
	out := KeySet{ClusterID: in.ClusterID}
	for _, kj := range in.Keys {
		if kj.Algorithm != Algorithm {
			return fmt.Errorf("%w: key %q: algorithm %q, want %q", ErrInvalidKeySet, kj.ID, kj.Algorithm, Algorithm)
		}
		pub, err := base64.RawURLEncoding.Strict().DecodeString(kj.PublicKey)
		if err != nil {
			return fmt.Errorf("%w: key %q: public key is not unpadded base64url: %v", ErrInvalidKeySet, kj.ID, err)
		}
		k := PublicKey{ID: kj.ID, Key: pub, Created: kj.Created}
		if kj.NotAfter != nil {
			k.NotAfter = *kj.NotAfter
		}
		out.Keys = append(out.Keys, k)
	}
	if err := out.Validate(); err != nil {
		return err
	}
	*ks = out
	return nil
}

// ReadKeySetFile reads and validates a key set file.
func ReadKeySetFile(path string) (KeySet, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return KeySet{}, fmt.Errorf("sequencer: read key set: %w", err)
	}
	var ks KeySet
	if err := json.Unmarshal(data, &ks); err != nil {
		return KeySet{}, fmt.Errorf("%s: %w", path, err)
	}
	return ks, nil
}

// Signer signs sequencers for one cluster. It holds the cluster's private keys: the newest
// one (the last added) signs; the others stay in its KeySet until removed, so sequencers they
// signed keep verifying during a rotation. A Signer is safe for concurrent use.
type Signer struct {
	cluster string

	mu   sync.RWMutex // protects keys
	keys []PrivateKey // the last one signs
}

// NewSigner returns a Signer for clusterID over keys; the last key signs.
func NewSigner(clusterID string, keys ...PrivateKey) (*Signer, error) {
	s := &Signer{cluster: clusterID, keys: slices.Clone(keys)}
	if err := s.keySetLocked().Validate(); err != nil {
		return nil, err
	}
	for _, k := range keys {
		if len(k.Key) != ed25519.PrivateKeySize {
			return nil, fmt.Errorf("%w: key %q: private key is %d bytes, want %d", ErrInvalidKeySet, k.ID, len(k.Key), ed25519.PrivateKeySize)
		}
	}
	return s, nil
}

// Rotate adds k and makes it the signing key. The previous keys stay in the key set.
func (s *Signer) Rotate(k PrivateKey) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := &Signer{cluster: s.cluster, keys: append(slices.Clone(s.keys), k)}
	if err := next.keySetLocked().Validate(); err != nil {
		return err
	}
	if len(k.Key) != ed25519.PrivateKeySize {
		return fmt.Errorf("%w: key %q: private key is %d bytes", ErrInvalidKeySet, k.ID, len(k.Key))
	}
	s.keys = next.keys
	return nil
}

// Remove drops the key named id from the signer and its key set. The signing key cannot be
// removed.
func (s *Signer) Remove(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.keys, func(k PrivateKey) bool { return k.ID == id })
	switch {
	case i < 0:
		return fmt.Errorf("%w: no key %q", ErrUnknownKey, id)
	case i == len(s.keys)-1:
		return fmt.Errorf("%w: key %q is the signing key", ErrInvalidKeySet, id)
	}
	s.keys = slices.Delete(slices.Clone(s.keys), i, i+1)
	return nil
}

// KeySet returns the public keys of every key the signer holds.
func (s *Signer) KeySet() KeySet {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.keySetLocked()
}

func (s *Signer) keySetLocked() KeySet {
	ks := KeySet{ClusterID: s.cluster}
	for _, k := range s.keys {
		ks.Keys = append(ks.Keys, k.Public())
	}
	return ks
}

// Sign fills q's ClusterID and KeyID with the signer's cluster and signing key, and returns the
// binary form of q, signed. Fields out of the format's range wrap ErrMalformed.
func (s *Signer) Sign(q Sequencer) ([]byte, error) {
	s.mu.RLock()
	k := s.keys[len(s.keys)-1]
	s.mu.RUnlock()
	q.ClusterID, q.KeyID = s.cluster, k.ID
	if err := q.validate(); err != nil {
		return nil, err
	}
	body := q.body(make([]byte, 0, MaxLen))
	return append(body, ed25519.Sign(k.Key, signedMessage(body))...), nil
}

// SignString is Sign returning the text form.
func (s *Signer) SignString(q Sequencer) (string, error) {
	b, err := s.Sign(q)
	if err != nil {
		return "", err
	}
	return EncodeToString(b), nil
}

// Verifier checks sequencers against a pinned KeySet. Several keys are trusted at once (a
// rotation); SetKeySet replaces them atomically. A Verifier is safe for concurrent use.
type Verifier struct {
	ks atomic.Pointer[verifierKeys]
}

type verifierKeys struct {
	cluster string
	keys    map[string]PublicKey
}

// NewVerifier returns a Verifier trusting ks.
func NewVerifier(ks KeySet) (*Verifier, error) {
	v := &Verifier{}
	if err := v.SetKeySet(ks); err != nil {
		return nil, err
	}
	return v, nil
}

// SetKeySet replaces the trusted keys (and cluster id) with ks after validating it; on error
// the old keys stay.
func (v *Verifier) SetKeySet(ks KeySet) error {
	if err := ks.Validate(); err != nil {
		return err
	}
	vk := &verifierKeys{cluster: ks.ClusterID, keys: make(map[string]PublicKey, len(ks.Keys))}
	for _, k := range ks.Keys {
		k.Key = slices.Clone(k.Key)
		vk.keys[k.ID] = k
	}
	v.ks.Store(vk)
	return nil
}

// ClusterID returns the cluster whose sequencers v accepts.
func (v *Verifier) ClusterID() string { return v.ks.Load().cluster }

// Verify decodes the binary sequencer b and returns it iff it is well-formed, comes from the
// verifier's cluster, names a trusted key, carries that key's valid signature, was issued
// before the key's not-after time and names lock. The errors wrap, in the order checked,
// ErrMalformed, ErrWrongCluster, ErrUnknownKey, ErrBadSignature, ErrKeyRetired and
// ErrWrongLock. Group is not compared.
func (v *Verifier) Verify(b []byte, lock string) (Sequencer, error) {
	q, n, err := parse(b)
	if err != nil {
		return Sequencer{}, err
	}
	vk := v.ks.Load()
	if q.ClusterID != vk.cluster {
		return Sequencer{}, fmt.Errorf("%w: issued by %q, want %q", ErrWrongCluster, q.ClusterID, vk.cluster)
	}
	k, ok := vk.keys[q.KeyID]
	if !ok {
		return Sequencer{}, fmt.Errorf("%w: %q is not in the key set of cluster %q", ErrUnknownKey, q.KeyID, vk.cluster)
	}
	if !ed25519.Verify(k.Key, signedMessage(b[:n]), b[n:]) {
		return Sequencer{}, fmt.Errorf("%w: key %q does not vouch for %s", ErrBadSignature, q.KeyID, q)
	}
	if !k.NotAfter.IsZero() && q.Issued().After(k.NotAfter) {
		return Sequencer{}, fmt.Errorf("%w: key %q retired at %s, sequencer issued at %s", ErrKeyRetired,
			q.KeyID, k.NotAfter.UTC().Format(time.RFC3339), q.Issued().UTC().Format(time.RFC3339Nano))
	}
	if q.Name != lock {
		return Sequencer{}, fmt.Errorf("%w: granted for %q, want %q", ErrWrongLock, q.Name, lock)
	}
	return q, nil
}

// VerifyString is Verify of the text form.
func (v *Verifier) VerifyString(s, lock string) (Sequencer, error) {
	b, err := DecodeString(s)
	if err != nil {
		return Sequencer{}, err
	}
	return v.Verify(b, lock)
}
