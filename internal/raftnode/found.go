package raftnode

import (
	"crypto/rand"
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
//
// Founders need not finish waiting together: one that heard every other
// voter founds, and those it heard may still wait for a voter that was
// slow to start; by the time they ask again, a quorum may have formed
// without them. Every founder therefore draws a random nonce when it
// starts waiting and sends it with its probes and answers; a node
// remembers, per voter, the nonce of the "not formed" answer it founded
// on. A node formed since answers "not formed" to a probe that carries
// the remembered nonce: that prober is the very process it counted as
// empty, which has been waiting ever since and holds nothing, so its
// founding configuration is the one the cluster started from. A node that
// lost its data starts with a new nonce and is refused as before; a node
// that restarted since founding remembers nothing and refuses too.

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

// foundingNonceLen is the length of a founding nonce.
const foundingNonceLen = 16

type nonce [foundingNonceLen]byte

// founding is what a founder remembers: its own nonce, and the nonce each
// other voter answered "not formed" with.
type founding struct {
	own nonce

	mu         sync.Mutex // protects cofounders
	cofounders map[string]nonce
}

func newFounding() *founding {
	f := &founding{cofounders: map[string]nonce{}}
	_, _ = rand.Read(f.own[:]) // never fails (crypto/rand)
	return f
}

// ownNonce is the nonce a node sends with its probes and answers: zero
// for a node that founded nothing since it started (f nil).
func (f *founding) ownNonce() []byte {
	if f == nil {
		return make([]byte, foundingNonceLen)
	}
	return f.own[:]
}

// cofounder reports whether voter id answered "not formed" with n while
// this node waited to found: the prober is that same waiting process.
func (f *founding) cofounder(id string, n nonce) bool {
	if f == nil || n == (nonce{}) {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	got, ok := f.cofounders[id]
	return ok && got == n
}

func (f *founding) heard(id string, n nonce) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cofounders[id] = n
}

// decideFounding is the founding decision of a node with an empty data dir
// and a bootstrap list of several voters: it returns the cluster id to
// start with and whether to bootstrap (see awaitFounding), and when it
// bootstraps, the founding its stream layer answers probes with.
func (c Config) decideFounding(clusterID string) (id string, f *founding, err error) {
	f = newFounding()
	err = awaitFounding(c, clusterID, f)
	switch {
	case err == nil:
		return clusterID, f, nil
	case errors.Is(err, ErrClusterFormed) && c.Rejoin != nil:
		c.Logger.Info("the cluster of the bootstrap list was formed before; joining it as a member that starts over", "node", c.NodeID, "reason", err)
		id, err := c.Rejoin()
		if err != nil {
			return "", nil, err
		}
		return id, nil, nil
	}
	return "", nil, err
}

// awaitFounding blocks until every other voter of cfg.Bootstrap answered
// the founding probe, listening on cfg.RaftAddr meanwhile to answer theirs
// (as a node that holds nothing). It returns nil when none holds more
// than the founding configuration, ErrClusterFormed when one does, and
// ErrShutdown when cfg.Abort is closed first. It probes and answers with
// f's nonce and records in f the nonce of every "not formed" answer. The
// listener is closed when it returns.
func awaitFounding(cfg Config, clusterID string, f *founding) error {
	sl, err := newStreamLayer(cfg.RaftAddr, cfg.PeerTLS, cfg.PeerSecret, clusterID, cfg.NodeID, cfg.Logger)
	if err != nil {
		return err
	}
	sl.founding = f
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
			switch {
			case a.formed:
				formedBy = append(formedBy, p.ID)
			case a.answered:
				f.heard(p.ID, a.nonce)
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
