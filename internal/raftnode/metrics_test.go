package raftnode

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

type nopMetrics struct{}

func (nopMetrics) LogAppend(time.Duration, int) {}
func (nopMetrics) FSMApply(time.Duration)       {}

// TestTimedStoreKeepsMonotonic: the metrics wrapper still tells raft that
// raft-wal needs a log without gaps, so that a follower installing a
// snapshot drops its older entries instead of failing the next append.
func TestTimedStoreKeepsMonotonic(t *testing.T) {
	store, err := openStore(t.TempDir(), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	m, ok := withMetrics(store, nopMetrics{}).(raft.MonotonicLogStore)
	if !ok || !m.IsMonotonic() {
		t.Fatal("the timed raft-wal store does not report IsMonotonic")
	}
	if m, ok := withMetrics(raft.NewInmemStore(), nopMetrics{}).(raft.MonotonicLogStore); ok && m.IsMonotonic() {
		t.Fatal("the timed in-memory store reports IsMonotonic")
	}
}
