package fence

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// boltBucket holds key -> 8-byte big-endian last token.
var boltBucket = []byte("leasehold.fence.tokens.v1")

// BoltTokenStore is a durable TokenStore in a local bbolt file: SetToken returns only after
// the transaction is fsync'd, so a token recorded before a response was sent survives a crash
// or restart. The file is locked against a second process opening it.
type BoltTokenStore struct {
	db *bolt.DB

	closeOnce sync.Once
	closeErr  error
}

// OpenBoltTokenStore opens (creating when missing, mode 0600) the bbolt file at path. It
// waits at most lockTimeout for another process's lock on the file (0 means 1 s).
func OpenBoltTokenStore(path string, lockTimeout time.Duration) (*BoltTokenStore, error) {
	if lockTimeout <= 0 {
		lockTimeout = time.Second
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout})
	if err != nil {
		return nil, fmt.Errorf("fence: open token store %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(boltBucket)
		return err
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("fence: init token store %s: %w", path, err)
	}
	return &BoltTokenStore{db: db}, nil
}

// LastToken implements TokenStore.
func (s *BoltTokenStore) LastToken(_ context.Context, key string) (uint64, error) {
	var t uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(boltBucket).Get([]byte(key))
		if v == nil {
			return nil
		}
		if len(v) != 8 {
			return fmt.Errorf("fence: corrupt token record for %q (%d bytes)", key, len(v))
		}
		t = binary.BigEndian.Uint64(v)
		return nil
	})
	return t, s.mapErr(err)
}

// SetToken implements TokenStore. The write is fsync'd before it returns.
func (s *BoltTokenStore) SetToken(_ context.Context, key string, token uint64) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(boltBucket)
		if v := b.Get([]byte(key)); len(v) == 8 && binary.BigEndian.Uint64(v) >= token {
			return nil
		}
		return b.Put([]byte(key), binary.BigEndian.AppendUint64(nil, token))
	})
	return s.mapErr(err)
}

func (s *BoltTokenStore) mapErr(err error) error {
	if errors.Is(err, bolterrors.ErrDatabaseNotOpen) {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}

// Path returns the file's path.
func (s *BoltTokenStore) Path() string { return s.db.Path() }

// Close closes the file, waiting for running transactions. It is idempotent.
func (s *BoltTokenStore) Close() error {
	s.closeOnce.Do(func() {
		s.closeErr = s.db.Close()
		if errors.Is(s.closeErr, os.ErrClosed) {
			s.closeErr = nil
		}
	})
	return s.closeErr
}
