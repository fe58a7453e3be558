package raftnode

import (
	"fmt"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/internal/fsm"
)

// Recovery from a permanent loss of quorum (Config.ForceNewCluster).

// aloneInConfig reports whether the stored configuration already is this
// node alone, so a restart that keeps ForceNewCluster changes nothing (the
// node keeps its cluster id and the members that joined since).
func aloneInConfig(cfg Config, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore, hlog hclog.Logger) (bool, error) {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = hlog
	// A scratch state machine and transport: reading the configuration
	// restores the newest snapshot into the FSM it is given.
	_, trans := raft.NewInmemTransport("")
	defer trans.Close()
	conf, err := raft.GetConfiguration(rc, &raftFSM{m: fsm.New(cfg.Limits)}, logs, stable, snaps, trans)
	if err != nil {
		return false, fmt.Errorf("raftnode: read configuration: %w", err)
	}
	return len(conf.Servers) == 1 && conf.Servers[0].ID == rc.LocalID && conf.Servers[0].Suffrage == raft.Voter, nil
}

// forceNewCluster rewrites the stored configuration to this node alone
// (raft.RecoverCluster): the log and snapshots stay, and so do the state
// and its token counter. It replays the log into a scratch state machine
// and snapshots it; raft then starts from that snapshot, so the node's own
// state machine (and its observer) sees only the recovered state.
func (n *Node) forceNewCluster(rc *raft.Config, logs raft.LogStore, snaps raft.SnapshotStore, self raft.ServerAddress) error {
	single := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(n.cfg.NodeID), Address: self}}}
	if err := raft.RecoverCluster(rc, &raftFSM{m: fsm.New(n.cfg.Limits)}, logs, n.store, snaps, n.trans, single); err != nil {
		return fmt.Errorf("raftnode: force new cluster: %w", err)
	}
	n.cfg.Logger.Warn("force-new-cluster: the configuration is now this node alone, under a new cluster id; grow it again with --join",
		"node", n.cfg.NodeID, "cluster_id", n.clusterID)
	return nil
}
