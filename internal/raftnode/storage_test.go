package raftnode

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
)

// fullStore is an in-memory log store whose appends fail with ENOSPC while
// full is set, as a data dir on a full disk.
type fullStore struct {
	*raft.InmemStore
	full bool
}

func (s *fullStore) StoreLogs(logs []*raft.Log) error {
	if s.full {
		return syscall.ENOSPC
	}
	return s.InmemStore.StoreLogs(logs)
}

// DeleteRange fails as raft-wal's does on a full disk: removing a tail
// creates a new segment file, preallocated.
func (s *fullStore) DeleteRange(lo, hi uint64) error {
	if s.full {
		return syscall.ENOSPC
	}
	return s.InmemStore.DeleteRange(lo, hi)
}

// latchedRefusal checks that op, refused by a full disk, failed with
// ErrStorage wrapping ENOSPC and closed g's Failed.
func latchedRefusal(t *testing.T, g *storageGuard, op string, err error) {
	t.Helper()
	if !errors.Is(err, ErrStorage) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("%s on a full disk: %v, want ErrStorage wrapping ENOSPC", op, err)
	}
	select {
	case <-g.failed:
	default:
		t.Fatalf("Failed not closed after a refused %s", op)
	}
}

// A refused removal of log entries (raft clearing a conflicting tail, or
// compacting after a snapshot) stops the node as a refused append does:
// raft-wal leaves the segment file it failed to set up behind, and every
// later attempt fails on it ("file exists") until the store is reopened,
// which removes it. Before, the node went on without ever catching up.
func TestStorageGuardLatchesAFailedDeleteRange(t *testing.T) {
	inner := &fullStore{InmemStore: raft.NewInmemStore()}
	g := newStorageGuard(slog.New(slog.NewTextHandler(io.Discard, nil)), "/data")
	s := guardedLogStore{inner, g}
	if err := s.StoreLogs([]*raft.Log{{Index: 1}, {Index: 2}, {Index: 3}}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(3, 3); err != nil {
		t.Fatal(err)
	}
	inner.full = true
	latchedRefusal(t, g, "DeleteRange", s.DeleteRange(2, 2))
	inner.full = false
	if err := s.DeleteRange(2, 2); !errors.Is(err, ErrStorage) {
		t.Fatalf("DeleteRange after the failure: %v, want ErrStorage", err)
	}
	if last, _ := inner.LastIndex(); last != 2 {
		t.Fatalf("the store's last index is %d, want 2: a removal after the failure went through", last)
	}
}

func TestStorageGuardLatchesAFailedAppend(t *testing.T) {
	inner := &fullStore{InmemStore: raft.NewInmemStore()}
	g := newStorageGuard(slog.New(slog.NewTextHandler(io.Discard, nil)), "/data")
	s := guardedLogStore{inner, g}
	if err := s.StoreLog(&raft.Log{Index: 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.failed:
		t.Fatal("failed before any write was refused")
	default:
	}
	inner.full = true
	latchedRefusal(t, g, "append", s.StoreLogs([]*raft.Log{{Index: 2}}))
	// Room again: the node still refuses, it must be started again.
	inner.full = false
	if err := s.StoreLog(&raft.Log{Index: 2}); !errors.Is(err, ErrStorage) {
		t.Fatalf("append after the failure: %v, want ErrStorage", err)
	}
	if last, _ := inner.LastIndex(); last != 1 {
		t.Fatalf("the store holds index %d, want 1: an append after the failure went through", last)
	}
	if !errors.Is(g.latched(), syscall.ENOSPC) {
		t.Fatalf("latched %v, want the first failure", g.latched())
	}
}

// fullStable is a stable store whose writes fail with ENOSPC.
type fullStable struct{ *raft.InmemStore }

func (fullStable) Set([]byte, []byte) error       { return syscall.ENOSPC }
func (fullStable) SetUint64([]byte, uint64) error { return syscall.ENOSPC }

// TestStableStoreRefusalExits: raft panics when it cannot persist its
// term; the guarded stable store ends the process first, with status 1
// and a line that names the data dir and the error.
func TestStableStoreRefusalExits(t *testing.T) {
	if os.Getenv("LEASEHOLD_RAFTNODE_STABLE_CHILD") != "" {
		g := newStorageGuard(slog.New(slog.NewTextHandler(io.Discard, nil)), "/data")
		_ = guardedStableStore{fullStable{raft.NewInmemStore()}, g}.SetUint64([]byte("CurrentTerm"), 7)
		os.Exit(0) // not reached when the store exits
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestStableStoreRefusalExits$")
	cmd.Env = append(os.Environ(), "LEASEHOLD_RAFTNODE_STABLE_CHILD=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("child ended with %v, want exit status 1; stderr %q", err, stderr.String())
	}
	if want := "leasehold: raftnode: the data dir refused a write /data: no space left on device"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q lacks %q", stderr.String(), want)
	}
}
