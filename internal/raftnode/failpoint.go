package raftnode

import (
	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/internal/failpoint"
)

// failpointLogStore crashes the process before or after an append when a
// failpoint build arms it.
type failpointLogStore struct{ raft.LogStore }

func (s failpointLogStore) StoreLog(l *raft.Log) error {
	return s.StoreLogs([]*raft.Log{l})
}

func (s failpointLogStore) StoreLogs(logs []*raft.Log) error {
	failpoint.Inject(failpoint.LogAppendBefore)
	err := s.LogStore.StoreLogs(logs)
	if err == nil {
		failpoint.Inject(failpoint.LogAppendAfter)
	}
	return err
}

// IsMonotonic passes on the store's answer (see isMonotonic).
func (s failpointLogStore) IsMonotonic() bool { return isMonotonic(s.LogStore) }

// withFailpoints wraps store in a failpoint build; a normal build gets
// store itself.
func withFailpoints(store raft.LogStore) raft.LogStore {
	if !failpoint.Enabled {
		return store
	}
	return failpointLogStore{store}
}
