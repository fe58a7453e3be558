package sequencer

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// The signer file holds a cluster's private keys, for the grantor only (mode 0600):
//
//	{"cluster_id": "...", "keys": [{"id": "k1", "algorithm": "ed25519",
//	  "private_key": "<unpadded base64url of the 32-byte seed>", "created": "<RFC 3339>",
//	  "not_after": "<RFC 3339, optional>"}]}
//
// The last key signs. Its public half is the key set file (Signer.KeySet, KeySet.MarshalJSON).

type signerJSON struct {
	ClusterID string           `json:"cluster_id"`
	Keys      []privateKeyJSON `json:"keys"`
}

type privateKeyJSON struct {
	ID         string     `json:"id"`
	Algorithm  string     `json:"algorithm"`
	PrivateKey string     `json:"private_key"`
	Created    time.Time  `json:"created"`
	NotAfter   *time.Time `json:"not_after,omitempty"`
}

// MarshalPrivate returns the signer file form of s (private keys: keep it secret).
func (s *Signer) MarshalPrivate() ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := signerJSON{ClusterID: s.cluster}
	for _, k := range s.keys {
		kj := privateKeyJSON{ID: k.ID, Algorithm: Algorithm, PrivateKey: base64.RawURLEncoding.EncodeToString(k.Key.Seed()), Created: k.Created.UTC()}
		if !k.NotAfter.IsZero() {
			na := k.NotAfter.UTC()
			kj.NotAfter = &na
		}
		out.Keys = append(out.Keys, kj)
	}
	return json.MarshalIndent(out, "", "  ")
}

// ParseSigner parses the signer file form strictly; errors wrap ErrInvalidKeySet.
func ParseSigner(data []byte) (*Signer, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var in signerJSON
	if err := dec.Decode(&in); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidKeySet, err)
	}
	var keys []PrivateKey
	for _, kj := range in.Keys {
		if kj.Algorithm != Algorithm {
			return nil, fmt.Errorf("%w: key %q: algorithm %q, want %q", ErrInvalidKeySet, kj.ID, kj.Algorithm, Algorithm)
		}
		seed, err := base64.RawURLEncoding.Strict().DecodeString(kj.PrivateKey)
		if err != nil || len(seed) != ed25519.SeedSize {
			return nil, fmt.Errorf("%w: key %q: private key is not %d bytes of unpadded base64url", ErrInvalidKeySet, kj.ID, ed25519.SeedSize)
		}
		k := PrivateKey{ID: kj.ID, Key: ed25519.NewKeyFromSeed(seed), Created: kj.Created}
		if kj.NotAfter != nil {
			k.NotAfter = *kj.NotAfter
		}
		keys = append(keys, k)
	}
	return NewSigner(in.ClusterID, keys...)
}

// ReadSignerFile reads a signer file.
func ReadSignerFile(path string) (*Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sequencer: read signer file: %w", err)
	}
	s, err := ParseSigner(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}
