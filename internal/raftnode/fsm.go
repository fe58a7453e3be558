package raftnode

import (
	"bufio"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/internal/failpoint"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// raftFSM adapts fsm.Machine to raft.FSM.
type raftFSM struct {
	observer  func(uint64, *fsm.Result)
	onRestore func(index uint64)
	metrics   Metrics // may be nil
	// snapshotIndex, when set, is the index of the newest snapshot in the
	// store: the one Restore reads (raft persists a snapshot it installs
	// before restoring it); 0 when unknown.
	snapshotIndex func() uint64

	mu sync.RWMutex // protects following
	m  *fsm.Machine
	// applied is the index of the last entry applied to m, or of the
	// snapshot restored into it; 0 when not known.
	applied uint64
}

func (f *raftFSM) Apply(l *raft.Log) any {
	var cmd fsmpb.Command
	if err := proto.Unmarshal(l.Data, &cmd); err != nil {
		// A committed entry that does not decode is corruption: no node may
		// skip it and stay equal to the others.
		panic(fmt.Sprintf("raftnode: undecodable log entry %d: %v", l.Index, err))
	}
	failpoint.Inject(failpoint.FSMApplyBefore)
	start := time.Now()
	f.mu.Lock()
	res := f.m.Apply(l.Index, &cmd)
	f.applied = l.Index
	f.mu.Unlock()
	failpoint.Inject(failpoint.FSMApplyAfter)
	if f.metrics != nil {
		f.metrics.FSMApply(time.Since(start))
	}
	if f.observer != nil {
		f.observer(l.Index, &res)
	}
	return &res
}

// Snapshot captures a view of the state under the read lock: a pointer
// per record, no encoding. Persist writes it as a stream without the lock.
func (f *raftFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return fsmSnapshot{f.m.Capture()}, nil
}

// Restore reads the snapshot stream record by record into a new Machine,
// without the lock, and swaps it in only when the whole stream was valid.
func (f *raftFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.mu.RLock()
	limits := f.m.Limits()
	f.mu.RUnlock()
	m, err := fsm.ReadSnapshot(limits, rc)
	if err != nil {
		return err
	}
	var at uint64
	if f.snapshotIndex != nil {
		at = f.snapshotIndex()
	}
	f.mu.Lock()
	f.m = m
	f.applied = at
	f.mu.Unlock()
	if f.onRestore != nil {
		f.onRestore(at)
	}
	return nil
}

type fsmSnapshot struct{ v *fsm.View }

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	failpoint.Inject(failpoint.SnapshotPersistBefore)
	w := bufio.NewWriterSize(sink, 64<<10)
	_, err := s.v.WriteTo(w)
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		_ = sink.Cancel()
		return err
	}
	if err := sink.Close(); err != nil {
		return err
	}
	failpoint.Inject(failpoint.SnapshotPersistAfter)
	return nil
}

func (fsmSnapshot) Release() {}
