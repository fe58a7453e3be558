package raftnode

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/hashicorp/raft"
)

// ErrStorage: the data dir refused a write (its disk is full, or an I/O
// error). The node accepts no further append and its server stops; once
// the disk has room again, the node is started again on its data dir and
// catches up from the leader.
var ErrStorage = errors.New("raftnode: the data dir refused a write")

// storageGuard latches the first write the data dir refuses. After a
// failed append raft's own view of its log may be off (raft-wal keeps a
// tail it failed to extend sealed until it is reopened), so the node must
// stop rather than go on.
type storageGuard struct {
	logger *slog.Logger
	dir    string
	failed chan struct{} // closed at the first refused write

	once sync.Once
	err  error // set before failed is closed
}

func newStorageGuard(logger *slog.Logger, dir string) *storageGuard {
	return &storageGuard{logger: logger, dir: dir, failed: make(chan struct{})}
}

// fail latches err and returns the latched error.
func (g *storageGuard) fail(err error) error {
	g.once.Do(func() {
		g.err = fmt.Errorf("%w %s: %w", ErrStorage, g.dir, err)
		g.logger.Error("the data dir refused a write; this node stops: give its disk room and start it again", "dir", g.dir, "err", err)
		close(g.failed)
	})
	return g.err
}

// latched is the latched error, or nil.
func (g *storageGuard) latched() error {
	select {
	case <-g.failed:
		return g.err
	default:
		return nil
	}
}

// guardedLogStore refuses every append and removal after the first one
// that failed.
type guardedLogStore struct {
	raft.LogStore
	g *storageGuard
}

func (s guardedLogStore) StoreLog(l *raft.Log) error {
	return s.StoreLogs([]*raft.Log{l})
}

func (s guardedLogStore) StoreLogs(logs []*raft.Log) error {
	if err := s.g.latched(); err != nil {
		return err
	}
	if err := s.LogStore.StoreLogs(logs); err != nil {
		return s.g.fail(err)
	}
	return nil
}

// DeleteRange removes entries (raft clearing a conflicting tail, or
// compacting after a snapshot). A refusal stops the node as a refused
// append does: raft-wal leaves behind the segment file it failed to set
// up, and every later attempt fails on it ("file exists") until the store
// is reopened, which removes it.
func (s guardedLogStore) DeleteRange(lo, hi uint64) error {
	if err := s.g.latched(); err != nil {
		return err
	}
	if err := s.LogStore.DeleteRange(lo, hi); err != nil {
		return s.g.fail(err)
	}
	return nil
}

func (s guardedLogStore) IsMonotonic() bool { return isMonotonic(s.LogStore) }

// guardedStableStore ends the process when the stable store refuses a
// write: raft panics when it cannot persist its term, and must not go on
// without its term and vote on disk.
type guardedStableStore struct {
	raft.StableStore
	g *storageGuard
}

func (s guardedStableStore) Set(k, v []byte) error {
	if err := s.StableStore.Set(k, v); err != nil {
		s.exit(err)
	}
	return nil
}

func (s guardedStableStore) SetUint64(k []byte, v uint64) error {
	if err := s.StableStore.SetUint64(k, v); err != nil {
		s.exit(err)
	}
	return nil
}

func (s guardedStableStore) exit(err error) {
	fmt.Fprintln(os.Stderr, "leasehold:", s.g.fail(err))
	os.Exit(1)
}

// isMonotonic passes on a wrapped store's answer: raft removes every log
// entry after installing a snapshot only on a store that says it needs no
// gaps (raft-wal), and would otherwise leave entries the next append
// cannot follow.
func isMonotonic(s raft.LogStore) bool {
	m, ok := s.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// Failed is closed when the data dir refused a write (see ErrStorage);
// StorageErr then says which.
func (n *Node) Failed() <-chan struct{} { return n.storage.failed }

// StorageErr is the write the data dir refused (wrapping ErrStorage), or
// nil.
func (n *Node) StorageErr() error { return n.storage.latched() }
