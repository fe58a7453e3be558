package raftnode

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// reopenPopulated populates a node on dir, closes it, reopens it and
// checks the state came back; the node is closed at return.
func reopenPopulated(t *testing.T, dir string) {
	t.Helper()
	n, err := Open(testConfig(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	waitLeader(t, n)
	populate(t, n)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n = open(t, testConfig(t, dir))
	waitLeader(t, n)
	if err := n.ReadIndex(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	checkPopulated(t, n)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestNewDataDirUsesWAL: a new data dir keeps its log in raft-wal (wal/),
// and it survives a restart.
func TestNewDataDirUsesWAL(t *testing.T) {
	dir := t.TempDir()
	reopenPopulated(t, dir)
	if !exists(filepath.Join(dir, "wal", "wal-meta.db")) || exists(filepath.Join(dir, "raft.db")) {
		t.Fatal("a new data dir has no wal/wal-meta.db, or has a raft.db")
	}
}

// TestBoltDataDirKeepsBolt: a data dir that already has raft.db (created
// before raft-wal) keeps its log there, and it survives a restart.
func TestBoltDataDirKeepsBolt(t *testing.T) {
	dir := t.TempDir()
	old, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	reopenPopulated(t, dir)
	if exists(filepath.Join(dir, "wal")) {
		t.Fatal("a data dir with raft.db got a wal/ as well")
	}
	s, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if last, err := s.LastIndex(); err != nil || last < 5 {
		t.Fatalf("raft.db holds the log up to %d (%v), want the populated entries", last, err)
	}
}

// TestStoreOpenedTwiceFails: a second store on a data dir in use fails
// within a second or so instead of waiting, for both kinds.
func TestStoreOpenedTwiceFails(t *testing.T) {
	for _, bolt := range []bool{false, true} {
		dir := t.TempDir()
		if bolt {
			old, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
			if err != nil {
				t.Fatal(err)
			}
			_ = old.Close()
		}
		s, err := openStore(dir, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			s2, err := openStore(dir, hclog.NewNullLogger())
			if err == nil {
				_ = s2.Close()
			}
			errc <- err
		}()
		select {
		case err := <-errc:
			if err == nil {
				t.Errorf("bolt=%v: a second store on a data dir in use opened", bolt)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("bolt=%v: a second store on a data dir in use still waits after 10 s", bolt)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStoreDeletedLogsNotFound: entries removed by DeleteRange (log
// compaction after a snapshot) are not found, so raft sends a snapshot.
func TestStoreDeletedLogsNotFound(t *testing.T) {
	s, err := openStore(t.TempDir(), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var logs []*raft.Log
	for i := uint64(1); i <= 10; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte{byte(i)}})
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(1, 6); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	for i := uint64(1); i <= 6; i++ {
		if err := s.GetLog(i, &l); err != raft.ErrLogNotFound {
			t.Errorf("GetLog(%d) after DeleteRange(1, 6) = %v, want ErrLogNotFound", i, err)
		}
	}
	if err := s.GetLog(7, &l); err != nil || l.Index != 7 {
		t.Errorf("GetLog(7) = %v, index %d", err, l.Index)
	}
}
