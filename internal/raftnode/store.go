package raftnode

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// logStore is a data dir's raft log and stable store.
type logStore interface {
	raft.LogStore
	raft.StableStore
	io.Closer
}

// openStore opens the raft log and stable store of dataDir. A new data dir
// gets raft-wal in dataDir/wal: one fsync per append batch, appended to a
// segment file. A data dir created before raft-wal, holding raft.db, keeps
// raft-boltdb there unchanged (two fsyncs and a B-tree commit per batch):
// its log is not migrated. A second server on the same data dir fails
// within a second.
func openStore(dataDir string, logger hclog.Logger) (logStore, error) {
	boltPath := filepath.Join(dataDir, "raft.db")
	switch _, err := os.Stat(boltPath); {
	case err == nil:
		st, err := raftboltdb.New(raftboltdb.Options{Path: boltPath, BoltOptions: &bbolt.Options{Timeout: time.Second}})
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("%w: %s is locked", ErrDataDirInUse, boltPath)
		}
		return st, err
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	dir := filepath.Join(dataDir, "wal")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// raft-wal's metadata file is opened with no lock timeout; this lock
	// makes a second server fail instead of waiting forever.
	lock, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = lock.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked", ErrDataDirInUse, dir)
		}
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	// WAL.Close leaves the metadata file open (and locked): Close closes it.
	meta := &metadb.BoltMetaDB{}
	w, err := wal.Open(dir, wal.WithLogger(logger.Named("wal")), wal.WithMetaStore(meta))
	if err != nil {
		return nil, errors.Join(err, meta.Close(), lock.Close())
	}
	return &walStore{WAL: w, meta: meta, lock: lock}, nil
}

// walStore is a raft-wal store holding its metadata file and its data
// dir's lock until Close.
type walStore struct {
	*wal.WAL
	meta *metadb.BoltMetaDB
	lock *os.File
}

// GetLog reports raft.ErrLogNotFound below FirstIndex: raft-wal still
// serves entries that DeleteRange removed while they sit in its tail
// segment, and raft must send a follower that far behind a snapshot.
func (s *walStore) GetLog(index uint64, log *raft.Log) error {
	first, err := s.WAL.FirstIndex()
	if err != nil {
		return err
	}
	if index < first {
		return raft.ErrLogNotFound
	}
	return s.WAL.GetLog(index, log)
}

func (s *walStore) Close() error {
	return errors.Join(s.WAL.Close(), s.meta.Close(), s.lock.Close())
}
