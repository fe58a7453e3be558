package raftnode

import (
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// raftFSM adapts fsm.Machine to raft.FSM.
type raftFSM struct {
	observer func(uint64, *fsm.Result)

	mu sync.RWMutex // protects following
	m  *fsm.Machine
}

func (f *raftFSM) Apply(l *raft.Log) any {
	var cmd fsmpb.Command
	if err := proto.Unmarshal(l.Data, &cmd); err != nil {
		// A committed entry that does not decode is corruption: no node may
		// skip it and stay equal to the others.
		panic(fmt.Sprintf("raftnode: undecodable log entry %d: %v", l.Index, err))
	}
	f.mu.Lock()
	res := f.m.Apply(l.Index, &cmd)
	f.mu.Unlock()
	if f.observer != nil {
		f.observer(l.Index, &res)
	}
	return &res
}

func (f *raftFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	data, err := f.m.Snapshot()
	if err != nil {
		return nil, err
	}
	return fsmSnapshot(data), nil
}

func (f *raftFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("raftnode: read snapshot: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m.Restore(data)
}

type fsmSnapshot []byte

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (fsmSnapshot) Release() {}
