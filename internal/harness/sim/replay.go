//go:build leasehold_sim

package sim

import (
	"fmt"
	"hash/fnv"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// replay rebuilds each stopped node's state from what its stores kept —
// the newest snapshot, then every command entry after it — into a fresh
// Machine, checking the grant stream again (P2, P6) and that the state hash
// at every replayed index is the one the cluster applied (P5).
func (c *Cluster) replay() {
	for _, n := range c.nodes {
		if err := c.replayNode(n); err != nil {
			c.violate("P5", "replay %s: %v", n.id, err)
		}
	}
}

func (c *Cluster) replayNode(n *node) error {
	m := fsm.New(fsm.DefaultLimits())
	rep := &replica{n: n, holders: map[string]uint64{}}
	var from uint64
	metas, err := n.snaps.List()
	if err != nil {
		return err
	}
	if len(metas) > 0 {
		_, rc, err := n.snaps.Open(metas[0].ID)
		if err != nil {
			return err
		}
		m, err = fsm.ReadSnapshot(fsm.DefaultLimits(), rc)
		_ = rc.Close()
		if err != nil {
			return err
		}
		from = metas[0].Index
	}
	rep.rebuild(m)
	first, err := n.logs.FirstIndex()
	if err != nil {
		return err
	}
	last, err := n.logs.LastIndex()
	if err != nil {
		return err
	}
	if first > from+1 && last > from {
		return fmt.Errorf("log starts at %d, snapshot ends at %d", first, from)
	}
	// Entries past the node's last applied one may be an uncommitted tail
	// (a deposed leader's, never truncated before the run ended) that
	// other entries replaced at those indexes: replay only what it applied
	// (stop applies everything committed before raft shuts down).
	last = min(last, n.lastApplied.Load())
	for i := from + 1; i <= last; i++ {
		var e raft.Log
		if err := n.logs.GetLog(i, &e); err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
		if e.Type != raft.LogCommand {
			continue
		}
		var cmd fsmpb.Command
		if err := proto.Unmarshal(e.Data, &cmd); err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
		res := c.safeApply(n.id+" replay", m, i, &cmd)
		rep.check(i, &res)
		snap, err := m.Snapshot()
		if err != nil {
			return err
		}
		h := fnv.New64a()
		h.Write(snap)
		c.mu.Lock()
		want, seen := c.hashes[i]
		c.mu.Unlock()
		if seen && want != h.Sum64() {
			return fmt.Errorf("index %d: replayed state hash %x, applied %x", i, h.Sum64(), want)
		}
	}
	return nil
}
