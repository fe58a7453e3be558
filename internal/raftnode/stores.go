package raftnode

import (
	"fmt"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Stores replaces the stores a node keeps in its data dir: its raft log,
// its stable store (term and vote) and its snapshots. It is for the
// deterministic simulation (internal/harness/sim), whose nodes run on in-memory
// stores that outlive a simulated crash; a server never sets it. The data
// dir still holds the cluster id. The node does not close these stores:
// their owner does, once no node uses them.
type Stores struct {
	Log       raft.LogStore
	Stable    raft.StableStore
	Snapshots raft.SnapshotStore
}

// openStores opens the data dir's log, stable and snapshot stores, or
// takes cfg.Stores when set.
func openStores(cfg Config, hlog hclog.Logger) (logStore, raft.SnapshotStore, error) {
	if s := cfg.Stores; s != nil {
		if s.Log == nil || s.Stable == nil || s.Snapshots == nil {
			return nil, nil, fmt.Errorf("raftnode: Stores needs a log, a stable and a snapshot store")
		}
		return givenStore{s.Log, s.Stable}, s.Snapshots, nil
	}
	store, err := openStore(cfg.DataDir, hlog)
	if err != nil {
		return nil, nil, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, hlog)
	if err != nil {
		_ = store.Close()
		return nil, nil, fmt.Errorf("raftnode: snapshot store: %w", err)
	}
	return store, snaps, nil
}

// givenStore is a Stores' log and stable store as one logStore; Close
// leaves them open for their owner.
type givenStore struct {
	raft.LogStore
	raft.StableStore
}

func (givenStore) Close() error { return nil }

// IsMonotonic passes on the log store's answer (see isMonotonic).
func (s givenStore) IsMonotonic() bool { return isMonotonic(s.LogStore) }
