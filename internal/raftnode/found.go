package raftnode

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Founding a cluster happens once. A node with an empty data dir and a
// bootstrap list of several voters founds the cluster (writes the founding
// configuration at index 1) only when it can show that the cluster was
// never formed: every other voter of the list has answered the probe of
// the Raft handshake (stream.go) that it holds nothing of this cluster but
// at most its founding configuration. Until then it waits, answering the
// probes of the others the same way, and founds nothing:
//
//	every voter answers "not formed"   found (bootstrap)
//	one voter answers "formed"         ErrClusterFormed, or Config.Rejoin
//	a voter does not answer            wait and ask again
//
// Why this is enough: an entry that was committed, or a vote that made a
// leader (a leader appends an entry when elected), is on a quorum, and a
// quorum of a list of two or more voters includes another voter, whose
// log then holds more than the founding configuration. A node whose data
// dir was lost therefore never founds the cluster again as long as it
// waits for every voter, even while those that hold the acknowledged
// entries are down: it would otherwise form, with one stale voter, a
// quorum that lacks them. The price is that the first start needs every
// voter of the list up; a founder that comes after the others elected a
// leader is told the cluster is formed and joins (Rejoin, or `cluster
// remove` and --join).

// foundProbeInterval is how often a founding node asks the voters that
// have not answered yet.
const foundProbeInterval = 250 * time.Millisecond

// foundLogInterval is how often a founding node says whom it waits for.
const foundLogInterval = 10 * time.Second

// formedIndex is the last log index of a node that holds nothing but a
// founding configuration.
const formedIndex = 1

// formed reports whether this node holds more of the cluster than its
// founding configuration: an entry after it, or a snapshot.
func (n *Node) formed() bool {
	last, err := n.store.LastIndex()
	return err != nil || last > formedIndex || n.fsm.snapshotIndex() > formedIndex
}

// decideFounding is the founding decision of a node with an empty data dir
// and a bootstrap list of several voters: it returns the cluster id to
// start with and whether to bootstrap (see awaitFounding).
func (c Config) decideFounding(clusterID string) (id string, bootstrap bool, err error) {
	err = awaitFounding(c, clusterID)
	switch {
	case err == nil:
		return clusterID, true, nil
	case errors.Is(err, ErrClusterFormed) && c.Rejoin != nil:
		c.Logger.Info("the cluster of the bootstrap list was formed before; joining it as a member that starts over", "node", c.NodeID, "reason", err)
		id, err := c.Rejoin()
		if err != nil {
			return "", false, err
		}
		return id, false, nil
	}
	return "", false, err
}

// awaitFounding blocks until every other voter of cfg.Bootstrap answered
// the founding probe, listening on cfg.RaftAddr meanwhile to answer theirs
// (as a node that holds nothing). It returns nil when none holds more
// than the founding configuration, ErrClusterFormed when one does, and
// ErrShutdown when cfg.Abort is closed first. The listener is closed
// when it returns.
func awaitFounding(cfg Config, clusterID string) error {
	sl, err := newStreamLayer(cfg.RaftAddr, cfg.PeerTLS, cfg.PeerSecret, clusterID, cfg.NodeID, cfg.Logger)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer func() { _ = sl.Close(); wg.Wait() }()
	wg.Go(func() { answerProbes(sl, &wg) })

	var pending []Peer
	for _, p := range cfg.Bootstrap {
		if p.ID != cfg.NodeID {
			pending = append(pending, p)
		}
	}
	cfg.Logger.Info("founding a new cluster: waiting until every voter of the bootstrap list answers that the cluster was never formed", "node", cfg.NodeID, "cluster_id", clusterID, "waiting_for", peerIDs(pending))
	lastLog := time.Now()
	for len(pending) > 0 {
		var formedBy []string
		pending = slices.DeleteFunc(pending, func(p Peer) bool {
			a := sl.probe(p.RaftAddr, probeTimeout)
			if a.formed {
				formedBy = append(formedBy, p.ID)
			}
			if a.otherCluster != "" {
				cfg.Logger.Warn("founding: a voter of the bootstrap list is in another cluster; is the list the same on every node?", "peer", p.ID, "peer_addr", p.RaftAddr, "peer_cluster", a.otherCluster, "cluster_id", clusterID)
			}
			return a.answered
		})
		if len(formedBy) > 0 {
			return fmt.Errorf("%w: %s is empty, yet voter %s of the bootstrap list holds the log of cluster %s: if node %s lost its data, remove it (leasehold cluster remove %s) and start it with --join ADDR instead of --bootstrap",
				ErrClusterFormed, cfg.DataDir, formedBy[0], clusterID, cfg.NodeID, cfg.NodeID)
		}
		if len(pending) == 0 {
			break
		}
		if time.Since(lastLog) >= foundLogInterval {
			cfg.Logger.Info("founding: still waiting for voters of the bootstrap list", "node", cfg.NodeID, "waiting_for", peerIDs(pending))
			lastLog = time.Now()
		}
		select {
		case <-cfg.Abort:
			return fmt.Errorf("%w: stopped while waiting to found the cluster", ErrShutdown)
		case <-time.After(foundProbeInterval):
		}
	}
	cfg.Logger.Info("founding: every voter of the bootstrap list answered; founding the cluster", "node", cfg.NodeID, "cluster_id", clusterID)
	return nil
}

// answerProbes serves the founding probes on sl (as a node that holds
// nothing) until sl is closed, which also ends the connections; other
// connections are closed once their handshake ran.
func answerProbes(sl *streamLayer, wg *sync.WaitGroup) {
	for {
		c, err := sl.Accept()
		if err != nil {
			return
		}
		// The handshake runs on the first Read: it answers a probe, refuses
		// another cluster, and for a Raft connection of a formed cluster
		// there is nothing to serve yet.
		wg.Go(func() {
			var b [1]byte
			_, _ = c.Read(b[:])
			_ = c.Close()
		})
	}
}

func peerIDs(peers []Peer) []string {
	ids := make([]string, len(peers))
	for i, p := range peers {
		ids[i] = p.ID
	}
	return ids
}
