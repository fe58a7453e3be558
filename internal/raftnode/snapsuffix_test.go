package raftnode

import (
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// walWithLog opens a raft-wal store in a temp dir holding entries 1..last
// of term 1 up to 5 and term 2 after, wrapped as Open wraps it.
func walWithLog(t *testing.T, last uint64) (suffixKeepingLogStore, markingSnapshotStore) {
	t.Helper()
	store, err := openStore(t.TempDir(), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	var logs []*raft.Log
	for i := uint64(1); i <= last; i++ {
		term := uint64(1)
		if i > 5 {
			term = 2
		}
		logs = append(logs, &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: []byte{byte(i)}})
	}
	if err := store.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	mark := &snapshotMark{}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(t.TempDir(), 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	return suffixKeepingLogStore{store, mark, testLogger(t)}, markingSnapshotStore{snaps, mark}
}

// snapshotAt creates (and cancels) a snapshot of index and term, as raft
// does before it writes one.
func snapshotAt(t *testing.T, snaps raft.SnapshotStore, index, term uint64) {
	t.Helper()
	sink, err := snaps.Create(raft.SnapshotVersionMax, index, term, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sink.Cancel(); err != nil {
		t.Fatal(err)
	}
}

// logSpan is the store's first and last index; 0, 0 when it is empty.
func logSpan(t *testing.T, s raft.LogStore) (uint64, uint64) {
	t.Helper()
	first, err := s.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err := s.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	if last == 0 {
		return 0, 0
	}
	for i := first; i <= last; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil || l.Index != i {
			t.Fatalf("entry %d of [%d, %d]: %v (index %d)", i, first, last, err, l.Index)
		}
	}
	return first, last
}

func TestInstalledSnapshotKeepsTheMatchingSuffix(t *testing.T) {
	cases := []struct {
		name                 string
		last                 uint64 // the log holds 1..last
		snapIndex, snapTerm  uint64
		lo, hi               uint64 // the range raft deletes
		wantFirst, wantLast  uint64 // 0, 0: empty
		committed            uint64 // raft's commit index
		compactedThrough     uint64 // the log starts after this index
		deleteBeforeSnapshot bool
	}{
		// The installed snapshot's entry is in the log: keep it and what follows (Raft's step 6).
		{name: "matching suffix", last: 10, snapIndex: 7, snapTerm: 2, lo: 1, hi: 10, wantFirst: 7, wantLast: 10},
		{name: "matching first entry", last: 10, snapIndex: 1, snapTerm: 1, lo: 1, hi: 10, wantFirst: 1, wantLast: 10},
		// The log starts right after the snapshot (installed before): keep it all.
		{name: "log right after the snapshot", last: 10, compactedThrough: 7, snapIndex: 7, snapTerm: 2, lo: 8, hi: 10, wantFirst: 8, wantLast: 10},
		// A gap between the snapshot and the log: discard it.
		{name: "log past the snapshot", last: 10, compactedThrough: 8, snapIndex: 7, snapTerm: 2, lo: 9, hi: 10},
		// The entry at the snapshot's index has another term: the suffix conflicts, discard it all (step 7).
		{name: "conflicting suffix", last: 10, snapIndex: 7, snapTerm: 3, lo: 1, hi: 10},
		// A suffix longer than one append could check is discarded too.
		{name: "suffix beyond one append", last: 7 + maxAppendEntries + 1, snapIndex: 7, snapTerm: 2, lo: 1, hi: 7 + maxAppendEntries + 1},
		{name: "committed suffix beyond one append", last: 7 + maxAppendEntries + 1, snapIndex: 7, snapTerm: 2, lo: 1, hi: 7 + maxAppendEntries + 1, committed: 8, wantFirst: 7, wantLast: 7 + maxAppendEntries + 1},
		{name: "committed suffix", last: 7 + 3*maxAppendEntries, snapIndex: 7, snapTerm: 2, lo: 1, hi: 7 + 3*maxAppendEntries, committed: 7 + 3*maxAppendEntries, wantFirst: 7, wantLast: 7 + 3*maxAppendEntries},
		{name: "suffix of one append", last: 7 + maxAppendEntries, snapIndex: 7, snapTerm: 2, lo: 1, hi: 7 + maxAppendEntries, wantFirst: 7, wantLast: 7 + maxAppendEntries},
		// The snapshot covers the whole log (a user restore, RecoverCluster, or a follower far behind).
		{name: "snapshot at the last entry", last: 10, snapIndex: 10, snapTerm: 2, lo: 1, hi: 10},
		{name: "snapshot past the log", last: 10, snapIndex: 11, snapTerm: 2, lo: 1, hi: 10},
		// A snapshot this node takes compacts a prefix, as raft asks.
		{name: "local compaction", last: 10, snapIndex: 7, snapTerm: 2, lo: 1, hi: 7, wantFirst: 8, wantLast: 10},
		// An append that conflicts clears the suffix as raft asks; the mark went with the append before it.
		{name: "conflicting append after a snapshot", last: 10, snapIndex: 7, snapTerm: 2, lo: 1, hi: 10, deleteBeforeSnapshot: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			logs, snaps := walWithLog(t, c.last)
			logs.mark.committed = func() uint64 { return c.committed }
			if c.compactedThrough > 0 {
				if err := logs.DeleteRange(1, c.compactedThrough); err != nil {
					t.Fatal(err)
				}
			}
			snapshotAt(t, snaps, c.snapIndex, c.snapTerm)
			if c.deleteBeforeSnapshot {
				if err := logs.StoreLog(&raft.Log{Index: c.last + 1, Term: 2}); err != nil {
					t.Fatal(err)
				}
				c.hi++
			}
			if err := logs.DeleteRange(c.lo, c.hi); err != nil {
				t.Fatal(err)
			}
			if first, last := logSpan(t, logs); first != c.wantFirst || last != c.wantLast {
				t.Fatalf("log after DeleteRange(%d, %d) following snapshot (%d, %d): [%d, %d], want [%d, %d]",
					c.lo, c.hi, c.snapIndex, c.snapTerm, first, last, c.wantFirst, c.wantLast)
			}
			// The snapshot's entry reads with its term, kept or not.
			var l raft.Log
			if err := logs.GetLog(c.snapIndex, &l); c.wantFirst != 0 && c.hi == c.last && (err != nil || l.Index != c.snapIndex || l.Term != c.snapTerm) {
				t.Fatalf("entry %d: %+v, %v; want term %d", c.snapIndex, l, err, c.snapTerm)
			}
			// The mark is used once: a second whole-log delete goes ahead.
			if c.wantLast != 0 {
				if err := logs.DeleteRange(c.wantFirst, c.wantLast); err != nil {
					t.Fatal(err)
				}
				if first, last := logSpan(t, logs); last != 0 {
					t.Fatalf("second delete left [%d, %d]", first, last)
				}
			}
		})
	}
}
