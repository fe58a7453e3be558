package raftnode

import (
	"errors"
	"log/slog"
	"sync"

	"github.com/hashicorp/raft"
)

// A follower that installs a snapshot from the leader on a raft-wal log
// store (a raft.MonotonicLogStore) has raft delete its whole log, through
// the log's last index L, whatever the snapshot's index S and term T
// (hashicorp/raft#697). Raft's own view of its last log entry stays at L.
// When L > S that view is false: the follower reports L to the leader, and
// once an append matching L arrives, raft commits and reads S+1 from the
// empty store and panics (`log not found`).
//
// suffixKeepingLogStore follows the Raft paper instead (InstallSnapshot,
// receiver step 6): when the log holds the entry at S with term T, the
// entries after it are kept and only those below S are deleted. The store
// stays contiguous and holds exactly up to L, so raft's view is true again.
// The entry at S itself stays: the leader's next append names S as its
// previous entry, and raft looks S up in the log because its last entry is
// L, not S. When the log starts right after S (the follower installed
// this snapshot before, or compacted through S), all of it is kept, and
// GetLog answers for S with the snapshot's term (an empty entry raft
// never applies: S is applied, and raft sends no entry whose previous one
// it cannot read). The entry before a log's first is always committed, as
// is S, so they are the same entry.
//
// It keeps the suffix only when at most maxAppendEntries of it lie past
// both S and the index raft already committed. After the snapshot the
// leader's next append starts right after S and carries at most
// maxAppendEntries entries, while raft then commits up to the leader's
// commit index bounded by its own last index (not by the last entry that
// append carried): a longer uncommitted suffix could have entries no
// append compared with the leader's log committed and applied. Such a
// suffix is deleted as raft asks (and the follower may hit #697, panic and
// be restarted, which loses nothing: it starts from its snapshot and
// catches up).
//
// When the entry at S has another term, the whole suffix conflicts with
// the leader's log (Log Matching) and raft's delete goes ahead (Raft's
// step 7: discard the entire log). Raft's stale view then costs liveness,
// not safety: every append naming an index in (S, L) finds no entry, one
// naming L finds a different term, so the follower refuses them all before
// committing anything, and the leader sends its snapshot again until that
// snapshot passes L. Keeping the conflicting suffix instead would let an
// append that matches below S leave it in place and have raft apply it
// past S. A log that starts past S+1 leaves a gap neither it nor the
// snapshot covers; its delete goes ahead too (raft's behaviour, #697).
//
// Only a whole-log delete right after a snapshot was created is changed:
// a snapshot this node takes itself deletes a prefix through at most S
// (raft's TrailingLogs), a restore (raft.Restore, RecoverCluster) creates
// its snapshot at or past L, and raft clears a conflicting suffix of an
// append with no snapshot in between; all of these reach the store as
// raft asks.
type suffixKeepingLogStore struct {
	raft.LogStore
	mark   *snapshotMark
	logger *slog.Logger
}

// KeepSuffixOnInstall wraps the log store and the snapshot store of one
// raft instance as described above (the log store is the inner one, below
// any cache). Call follow with the raft instance once it runs, so that the
// log store can read raft's commit index.
func KeepSuffixOnInstall(logs raft.LogStore, snaps raft.SnapshotStore, logger *slog.Logger) (raft.LogStore, raft.SnapshotStore, func(*raft.Raft)) {
	mark := &snapshotMark{}
	return suffixKeepingLogStore{logs, mark, logger}, markingSnapshotStore{snaps, mark}, mark.follow
}

// maxAppendEntries is raft's MaxAppendEntries, which Open leaves at
// raft.DefaultConfig's value.
var maxAppendEntries = uint64(raft.DefaultConfig().MaxAppendEntries)

// snapshotMark is the index and term of the snapshot raft created last,
// until the next write to the log store.
type snapshotMark struct {
	mu        sync.Mutex // guards the fields below
	set       bool
	index     uint64
	term      uint64
	committed func() uint64 // raft's commit index once raft runs; nil before

	// The snapshot a kept log starts right after; 0, 0 for none.
	baseIndex, baseTerm uint64
}

// follow has the mark read raft's commit index from r.
func (m *snapshotMark) follow(r *raft.Raft) {
	m.mu.Lock()
	m.committed = r.CommitIndex
	m.mu.Unlock()
}

func (m *snapshotMark) put(index, term uint64) {
	m.mu.Lock()
	m.set, m.index, m.term = true, index, term
	m.mu.Unlock()
}

// take returns the mark, if one is set, and clears it.
func (m *snapshotMark) take() (index, term uint64, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	index, term, ok = m.index, m.term, m.set
	m.set = false
	return index, term, ok
}

// keptAfter records that the log was kept starting right after the
// snapshot (index, term).
func (m *snapshotMark) keptAfter(index, term uint64) {
	m.mu.Lock()
	m.baseIndex, m.baseTerm = index, term
	m.mu.Unlock()
}

// base is the snapshot a kept log starts right after.
func (m *snapshotMark) base() (index, term uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.baseIndex, m.baseTerm
}

// commitIndex is raft's commit index, or 0 before raft runs.
func (m *snapshotMark) commitIndex() uint64 {
	m.mu.Lock()
	committed := m.committed
	m.mu.Unlock()
	if committed == nil {
		return 0
	}
	return committed()
}

// markingSnapshotStore sets mark to each snapshot it creates.
type markingSnapshotStore struct {
	raft.SnapshotStore
	mark *snapshotMark
}

func (s markingSnapshotStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration, configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err == nil {
		s.mark.put(index, term)
	}
	return sink, err
}

func (s suffixKeepingLogStore) StoreLog(l *raft.Log) error {
	return s.StoreLogs([]*raft.Log{l})
}

func (s suffixKeepingLogStore) StoreLogs(logs []*raft.Log) error {
	s.mark.take()
	return s.LogStore.StoreLogs(logs)
}

func (s suffixKeepingLogStore) DeleteRange(lo, hi uint64) error {
	if index, term, ok := s.mark.take(); ok {
		keep, err := s.keepFrom(lo, hi, index, term)
		if err != nil {
			return err
		}
		if keep > 0 {
			s.logger.Info("kept the log entries after an installed snapshot", "snapshot-index", index, "snapshot-term", term, "from", keep, "to", hi)
			return s.LogStore.DeleteRange(lo, keep-1)
		}
	}
	return s.LogStore.DeleteRange(lo, hi)
}

// keepFrom is the first index to keep when raft deletes [lo, hi] right
// after creating the snapshot (index, term), or 0 to delete all of it.
func (s suffixKeepingLogStore) keepFrom(lo, hi, index, term uint64) (uint64, error) {
	if index >= hi {
		return 0, nil
	}
	if checked := max(index, s.mark.commitIndex()); hi > checked && hi-checked > maxAppendEntries {
		return 0, nil
	}
	first, err := s.FirstIndex()
	if err != nil {
		return 0, err
	}
	last, err := s.LastIndex()
	if err != nil {
		return 0, err
	}
	switch {
	case lo != first || hi != last || index+1 < first:
		return 0, nil // not the whole log, or a gap after the snapshot
	case index+1 == first:
		s.mark.keptAfter(index, term)
		return first, nil
	}
	var l raft.Log
	switch err := s.GetLog(index, &l); {
	case errors.Is(err, raft.ErrLogNotFound):
		return 0, nil
	case err != nil:
		return 0, err
	case l.Term != term:
		return 0, nil
	}
	return index, nil
}

// GetLog answers for the snapshot a kept log starts right after with an
// empty entry of the snapshot's term.
func (s suffixKeepingLogStore) GetLog(index uint64, l *raft.Log) error {
	err := s.LogStore.GetLog(index, l)
	if !errors.Is(err, raft.ErrLogNotFound) {
		return err
	}
	base, term := s.mark.base()
	if base == 0 || index != base {
		return err
	}
	if first, ferr := s.FirstIndex(); ferr != nil || first != base+1 {
		return err
	}
	*l = raft.Log{Index: base, Term: term, Type: raft.LogNoop}
	return nil
}

// IsMonotonic passes on the store's answer (see isMonotonic).
func (s suffixKeepingLogStore) IsMonotonic() bool { return isMonotonic(s.LogStore) }
