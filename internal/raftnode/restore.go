package raftnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// Backups and the token floor.
//
// A state that comes back from the past — a data dir copied by hand and
// started again, or any node restarted from its own disk — knows its token
// counter but not what the cluster issued while it was away. So the first
// time a node that started from existing state leads after its process
// started, it raises the counter by fsm.GrantClock.Floor (time since the
// newest grant stamp × a bound on the grant rate) through the log, before
// any other command of its term is proposed: Apply waits for the floor.
// A live failover between running nodes does not bump; a full restart
// bumps once, by the downtime × the rate bound (tokens need not be dense).
//
// A restore from a backup (Restore) builds a new single-node cluster whose
// first entries after the snapshot are the floor, so the node never serves
// a grant below it.

// now returns the wall clock the floor is computed from.
func (n *Node) now() time.Time {
	if n.cfg.Now != nil {
		return n.cfg.Now()
	}
	return time.Now()
}

// waitFloor holds a command of a leader until its floor is applied. It is
// a no-op on a node that started empty, or once the floor is in. Commands
// that only raise the counter pass.
func (n *Node) waitFloor(ctx context.Context, cmd *fsmpb.Command) error {
	switch cmd.GetOp().(type) {
	case *fsmpb.Command_BumpToken, *fsmpb.Command_TokenFloor:
		return nil
	}
	for n.floorPending.Load() {
		if err := n.leaderErr(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for the token floor: %w", ErrUnavailable, ctx.Err())
		case <-n.done:
			return ErrShutdown
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// raiseFloor applies the restart floor if this node still owes one. Like
// barrier, it retries while this node leads and reports false when
// leadership or the node is gone.
func (n *Node) raiseFloor() bool {
	for n.floorPending.Load() && n.raft.State() == raft.Leader {
		var g fsm.GrantClock
		n.Read(func(m *fsm.Machine) { g = m.GrantClock() })
		now := n.now().UnixMilli()
		floor := g.Floor(now)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		// BumpToken, which every leasehold version applies, so that a
		// rolling upgrade's first restarted leader does not stop the others.
		res, err := n.Apply(ctx, &fsmpb.Command{UnixMs: now, Op: &fsmpb.Command_BumpToken{BumpToken: &fsmpb.BumpToken{Min: floor}}})
		cancel()
		if err == nil {
			err = res.Err
		}
		if errors.Is(err, ErrShutdown) {
			return false
		}
		if err == nil {
			n.floorPending.Store(false)
			n.cfg.Logger.Warn("raised the token counter after a restart from existing state",
				"node", n.cfg.NodeID, "token", g.Token, "floor", floor, "last_grant_unix_ms", g.LastGrantUnixMs, "peak_rate", g.PeakRate)
			return true
		}
		n.cfg.Logger.Warn("raising the token floor failed", "err", err)
		select {
		case <-n.done:
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
	return n.raft.State() == raft.Leader
}

// Backup takes a snapshot of the state now, on the leader, and opens it: a
// consistent cut that holds every command acknowledged before the call.
// The caller reads the snapshot stream from the ReadCloser and closes it.
func (n *Node) Backup(ctx context.Context) (*raft.SnapshotMeta, io.ReadCloser, error) {
	if err := n.ReadIndex(ctx); err != nil {
		return nil, nil, err
	}
	for {
		// A command, so that raft has something new to snapshot even when
		// an automatic snapshot just covered the log.
		if _, err := n.Apply(ctx, &fsmpb.Command{UnixMs: n.now().UnixMilli(), Op: &fsmpb.Command_BumpToken{BumpToken: &fsmpb.BumpToken{}}}); err != nil {
			return nil, nil, err
		}
		f := n.raft.Snapshot()
		err := n.await(ctx, f)
		if errors.Is(err, raft.ErrNothingNewToSnapshot) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%w: snapshot: %w", ErrUnavailable, err)
		}
		return f.Open()
	}
}

// RestoreResult describes a data dir built by Restore.
type RestoreResult struct {
	// Clock is the grant clock of the snapshot.
	Clock fsm.GrantClock
	// Floor is the token counter the new cluster starts from.
	Floor uint64
	// Index is the log index of the restored snapshot in the new cluster.
	Index uint64
}

// Snapshot is a snapshot stream to restore.
type Snapshot struct {
	Stream io.ReadSeeker
	Size   int64 // bytes of Stream
	// Index is the log index the snapshot was taken at: the new cluster's
	// log continues above it, so log indexes (Watch events carry them)
	// never go back across a restore. 0 when unknown.
	Index uint64
}

// Restore builds a new data dir, cfg.DataDir (absent or empty), for a new
// single-node cluster of cfg.NodeID holding the state of the snapshot. floor is given the snapshot's grant clock and
// returns the token counter the new cluster must start from; Restore
// applies it, and ends every session of the snapshot (their holders must
// acquire again), before the node ever serves. The stream is read twice:
// once to validate it (raft cannot refuse a snapshot it was handed), once
// to restore it.
func Restore(ctx context.Context, cfg Config, snap Snapshot, floor func(fsm.GrantClock) (uint64, error)) (RestoreResult, error) {
	if ents, err := os.ReadDir(cfg.DataDir); err == nil && len(ents) > 0 {
		return RestoreResult{}, fmt.Errorf("raftnode: restore builds a new data dir, and %s is not empty", cfg.DataDir)
	}
	if _, err := fsm.ReadSnapshot(cfg.Limits, io.LimitReader(snap.Stream, snap.Size)); err != nil {
		return RestoreResult{}, fmt.Errorf("raftnode: restore: %w", err)
	}
	if _, err := snap.Stream.Seek(0, io.SeekStart); err != nil {
		return RestoreResult{}, fmt.Errorf("raftnode: restore: %w", err)
	}
	addr := cfg.RaftAddr
	if addr == "" {
		addr = cfg.NodeID // the in-memory transport's address
	}
	cfg.Join = false
	cfg.Bootstrap = []Peer{{ID: cfg.NodeID, RaftAddr: addr}}
	n, err := Open(cfg)
	if err != nil {
		return RestoreResult{}, err
	}
	defer n.Close()
	for !n.IsLeader() {
		select {
		case <-ctx.Done():
			return RestoreResult{}, fmt.Errorf("raftnode: restore: the new node did not elect itself: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := n.ReadIndex(ctx); err != nil {
		return RestoreResult{}, fmt.Errorf("raftnode: restore: %w", err)
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Size: snap.Size, Index: snap.Index}
	if err := n.raft.Restore(meta, io.LimitReader(snap.Stream, snap.Size), timeoutOf(ctx)); err != nil {
		return RestoreResult{}, fmt.Errorf("raftnode: restore: %w", err)
	}
	var res RestoreResult
	n.Read(func(m *fsm.Machine) { res.Clock = m.GrantClock() })
	if res.Floor, err = floor(res.Clock); err != nil {
		return RestoreResult{}, err
	}
	ar, err := n.Apply(ctx, &fsmpb.Command{UnixMs: n.now().UnixMilli(), Op: &fsmpb.Command_TokenFloor{TokenFloor: &fsmpb.TokenFloor{Min: res.Floor, DropSessions: true}}})
	if err == nil {
		err = ar.Err
	}
	if err != nil {
		return RestoreResult{}, fmt.Errorf("raftnode: restore: token floor: %w", err)
	}
	res.Index = n.raft.LastIndex()
	// A snapshot now makes the restored state and its floor one file.
	if err := n.await(ctx, n.raft.Snapshot()); err != nil {
		return RestoreResult{}, fmt.Errorf("raftnode: restore: snapshot: %w", err)
	}
	return res, n.Close()
}

func timeoutOf(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return max(time.Until(dl), time.Millisecond)
	}
	return time.Minute
}
