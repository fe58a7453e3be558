package boltfence

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/leasehold/leasehold/fence"
)

// boltBucket holds key -> 8-byte big-endian last token, then 8-byte big-endian Unix
// nanoseconds of the last SetToken that changed or confirmed it. Records written before the
// time was kept (8 bytes) are stamped with the open time by Open.
var boltBucket = []byte("leasehold.fence.tokens.v1")

// DefaultMaxKeys is the default bound on the keys of a Store (SetMaxKeys).
const DefaultMaxKeys = 1_000_000

// Store is a durable fence.TokenStore in a local bbolt file: SetToken returns only after
// the transaction is fsync'd, so a token recorded before a response was sent survives a crash
// or restart. The file is locked against a second process opening it.
//
// It holds at most MaxKeys keys (DefaultMaxKeys unless SetMaxKeys): recording a token for
// a new key beyond that fails with fence.ErrTooManyKeys, and nothing is recorded. DropIdle removes
// keys not written for a while.
type Store struct {
	db      *bolt.DB
	keys    atomic.Int64 // number of keys; changed only inside bolt's (serialized) write transactions
	maxKeys atomic.Int64

	closeOnce sync.Once
	closeErr  error
}

// Open opens (creating when missing, mode 0600) the bbolt file at path. It
// waits at most lockTimeout for another process's lock on the file (0 means 1 s).
func Open(path string, lockTimeout time.Duration) (*Store, error) {
	if lockTimeout <= 0 {
		lockTimeout = time.Second
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout})
	if err != nil {
		return nil, fmt.Errorf("fence: open token store %s: %w", path, err)
	}
	s := &Store{db: db}
	s.maxKeys.Store(DefaultMaxKeys)
	now := time.Now()
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(boltBucket)
		if err != nil {
			return err
		}
		var n int64
		var legacy [][2][]byte
		err = b.ForEach(func(k, v []byte) error {
			n++
			if len(v) == 8 {
				legacy = append(legacy, [2][]byte{k, boltRecord(binary.BigEndian.Uint64(v), now)})
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, kv := range legacy {
			if err := b.Put(kv[0], kv[1]); err != nil {
				return err
			}
		}
		s.keys.Store(n)
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("fence: init token store %s: %w", path, err)
	}
	return s, nil
}

func boltRecord(token uint64, at time.Time) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(make([]byte, 0, 16), token), uint64(at.UnixNano()))
}

// parseBoltRecord returns a record's token and time (zero for an 8-byte record).
func parseBoltRecord(key, v []byte) (uint64, time.Time, error) {
	switch len(v) {
	case 8:
		return binary.BigEndian.Uint64(v), time.Time{}, nil
	case 16:
		return binary.BigEndian.Uint64(v), time.Unix(0, int64(binary.BigEndian.Uint64(v[8:]))), nil
	}
	return 0, time.Time{}, fmt.Errorf("fence: corrupt token record for %q (%d bytes)", key, len(v))
}

// SetMaxKeys sets the bound on the number of keys (n ≤ 0 means DefaultMaxKeys). Keys
// already stored beyond a lowered bound stay; only new keys are refused.
func (s *Store) SetMaxKeys(n int) {
	if n <= 0 {
		n = DefaultMaxKeys
	}
	s.maxKeys.Store(int64(n))
}

// MaxKeys returns the bound on the number of keys.
func (s *Store) MaxKeys() int { return int(s.maxKeys.Load()) }

// Len returns the number of keys stored.
func (s *Store) Len() int { return int(s.keys.Load()) }

// Full reports whether a new key would be refused with fence.ErrTooManyKeys (see KeyLimiter).
func (s *Store) Full() bool { return s.keys.Load() >= s.maxKeys.Load() }

// LastToken implements TokenStore.
func (s *Store) LastToken(_ context.Context, key string) (uint64, error) {
	var t uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(boltBucket).Get([]byte(key))
		if v == nil {
			return nil
		}
		var err error
		t, _, err = parseBoltRecord([]byte(key), v)
		return err
	})
	return t, s.mapErr(err)
}

// SetToken implements TokenStore. The write is fsync'd before it returns. A new key beyond
// MaxKeys fails with fence.ErrTooManyKeys.
func (s *Store) SetToken(_ context.Context, key string, token uint64) error {
	now := time.Now()
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(boltBucket)
		v := b.Get([]byte(key))
		if v == nil {
			if n, max := s.keys.Load(), s.maxKeys.Load(); n >= max {
				return fmt.Errorf("%w: the token store holds %d keys (max %d)", fence.ErrTooManyKeys, n, max)
			}
		} else if t, _, err := parseBoltRecord([]byte(key), v); err == nil && t > token {
			return nil
		}
		if err := b.Put([]byte(key), boltRecord(token, now)); err != nil {
			return err
		}
		if v == nil {
			tx.OnCommit(func() { s.keys.Add(1) })
		}
		return nil
	})
	return s.mapErr(err)
}

// DropIdle deletes every key whose token was last recorded before before, and returns how
// many it deleted. A dropped key's fence is gone: the next token for it is admitted whatever
// it is, so drop only keys for which no holder can still present a stale token (idle far
// longer than any lock's TTL plus any pause a holder can survive).
func (s *Store) DropIdle(_ context.Context, before time.Time) (int, error) {
	var dropped int
	err := s.db.Update(func(tx *bolt.Tx) error {
		c := tx.Bucket(boltBucket).Cursor()
		for k, v := c.First(); k != nil; {
			_, at, err := parseBoltRecord(k, v)
			if err != nil {
				return err
			}
			if at.Before(before) {
				k = append([]byte(nil), k...) // the page memory k points into may change
				if err := c.Delete(); err != nil {
					return err
				}
				dropped++
				k, v = c.Seek(k) // Delete moves the cursor: re-seek from the deleted key
				continue
			}
			k, v = c.Next()
		}
		n := int64(dropped)
		tx.OnCommit(func() { s.keys.Add(-n) })
		return nil
	})
	if err != nil {
		return 0, s.mapErr(err)
	}
	return dropped, nil
}

func (s *Store) mapErr(err error) error {
	if errors.Is(err, bolterrors.ErrDatabaseNotOpen) {
		return fmt.Errorf("%w: %w", fence.ErrClosed, err)
	}
	return err
}

// Path returns the file's path.
func (s *Store) Path() string { return s.db.Path() }

// Close closes the file, waiting for running transactions. It is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closeErr = s.db.Close()
		if errors.Is(s.closeErr, os.ErrClosed) {
			s.closeErr = nil
		}
	})
	return s.closeErr
}
