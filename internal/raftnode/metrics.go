package raftnode

import (
	"time"

	"github.com/hashicorp/raft"
)

// Metrics receives timings of the node's storage and state machine. Its
// methods are called on raft's goroutines and must not block. A nil
// Config.Metrics observes nothing.
type Metrics interface {
	// LogAppend reports one append of n entries to the log store, which
	// includes its fsync.
	LogAppend(d time.Duration, n int)
	// FSMApply reports the time the state machine took to apply one entry.
	FSMApply(d time.Duration)
}

// timedLogStore reports the duration of every append (StoreLog(s)) of the
// raft.LogStore it wraps.
type timedLogStore struct {
	raft.LogStore
	m Metrics
}

func (s timedLogStore) StoreLog(l *raft.Log) error {
	start := time.Now()
	err := s.LogStore.StoreLog(l)
	s.m.LogAppend(time.Since(start), 1)
	return err
}

func (s timedLogStore) StoreLogs(logs []*raft.Log) error {
	start := time.Now()
	err := s.LogStore.StoreLogs(logs)
	s.m.LogAppend(time.Since(start), len(logs))
	return err
}

// withMetrics wraps store when m is set.
func withMetrics(store raft.LogStore, m Metrics) raft.LogStore {
	if m == nil {
		return store
	}
	return timedLogStore{store, m}
}

// IsMonotonic passes on the store's answer (see isMonotonic).
func (s timedLogStore) IsMonotonic() bool { return isMonotonic(s.LogStore) }
