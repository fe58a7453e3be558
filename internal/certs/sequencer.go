package certs

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/leasehold/leasehold/sequencer"
)

// Sequencer key files inside the certs directory.
const (
	// SequencerKey is the cluster's signer file (private keys, 0600): serve --sequencer-key.
	SequencerKey = "sequencer.key"
	// SequencerKeySet is its public key set (0644): what resources pin (gateway --keyset).
	SequencerKeySet = "sequencer-keys.json"
)

// CreateSequencerKey writes a new signing key for clusterID to sequencer.key and its public
// key set to sequencer-keys.json. With rotate, an existing sequencer.key keeps its keys and the
// new key (keyID) becomes the signing one; without it an existing file is ErrExists unless
// o.Overwrite.
func CreateSequencerKey(o Options, clusterID, keyID string, rotate bool) error {
	if err := o.validate(); err != nil {
		return err
	}
	k, err := sequencer.GenerateKey(nil, keyID, o.now())
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var s *sequencer.Signer
	existing, rerr := sequencer.ReadSignerFile(filepath.Join(o.Dir, SequencerKey))
	switch {
	case rotate && rerr != nil:
		return fmt.Errorf("%w: --rotate: %v", ErrInvalid, rerr)
	case rotate:
		if clusterID != "" && clusterID != existing.KeySet().ClusterID {
			return fmt.Errorf("%w: --cluster-id %q differs from the key file's %q", ErrInvalid, clusterID, existing.KeySet().ClusterID)
		}
		if err := existing.Rotate(k); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		s = existing
		o.Overwrite = true
	default:
		if !errors.Is(rerr, os.ErrNotExist) && !o.Overwrite {
			return fmt.Errorf("%w: %s (use --rotate to add a key)", ErrExists, filepath.Join(o.Dir, SequencerKey))
		}
		if s, err = sequencer.NewSigner(clusterID, k); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	if err := o.refuseExisting(SequencerKey, SequencerKeySet); err != nil {
		return err
	}
	priv, err := s.MarshalPrivate()
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	pub, err := json.MarshalIndent(s.KeySet(), "", "  ")
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	if err := o.writeFile(SequencerKey, append(priv, '\n'), 0o600); err != nil {
		return err
	}
	return o.writeFile(SequencerKeySet, append(pub, '\n'), 0o644)
}
