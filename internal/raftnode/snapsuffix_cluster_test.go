package raftnode

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// countFSM counts the commands applied to it and the snapshots it
// restored.
type countFSM struct {
	mu       sync.Mutex // guards n and restores
	n        uint64
	restores int
}

func (f *countFSM) Apply(*raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	return nil
}

func (f *countFSM) count() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

func (f *countFSM) restored() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.restores
}

func (f *countFSM) Snapshot() (raft.FSMSnapshot, error) { return countSnapshot(f.count()), nil }

func (f *countFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var b [8]byte
	if _, err := io.ReadFull(rc, b[:]); err != nil {
		return err
	}
	f.mu.Lock()
	f.n = binary.BigEndian.Uint64(b[:])
	f.restores++
	f.mu.Unlock()
	return nil
}

type countSnapshot uint64

func (s countSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(binary.BigEndian.AppendUint64(nil, uint64(s))); err != nil {
		return errors.Join(err, sink.Cancel())
	}
	return sink.Close()
}

func (countSnapshot) Release() {}

// refusingTransport answers one append to a chosen follower, after the
// follower stored it, as a refusal from a follower with an empty log: the
// leader then sends that follower its snapshot although the follower's
// log runs past it. Appends are not pipelined, so each is answered alone.
type refusingTransport struct {
	*raft.InmemTransport
	refuse atomic.Pointer[raft.ServerID] // the follower whose next append is refused
}

func (t *refusingTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

func (t *refusingTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if err := t.InmemTransport.AppendEntries(id, target, args, resp); err != nil {
		return err
	}
	if p := t.refuse.Load(); p != nil && *p == id && len(args.Entries) > 0 && resp.Success && t.refuse.CompareAndSwap(p, nil) {
		resp.Success, resp.LastLog, resp.NoRetryBackoff = false, 0, true
	}
	return nil
}

type rawNode struct {
	id    raft.ServerID
	addr  raft.ServerAddress
	trans *refusingTransport
	fsm   *countFSM
	r     *raft.Raft
}

// rawCluster starts 3 raft nodes on the in-memory transport, each on a
// raft-wal store in a temp dir wrapped as Open wraps it, compacting all
// the log a snapshot covers and taking snapshots only when asked.
func rawCluster(t *testing.T) []*rawNode {
	t.Helper()
	var nodes []*rawNode
	var conf raft.Configuration
	for i := range 3 {
		addr, trans := raft.NewInmemTransportWithTimeout(raft.ServerAddress(fmt.Sprintf("n%d", i)), 10*time.Second)
		n := &rawNode{id: raft.ServerID(fmt.Sprintf("n%d", i)), addr: addr, trans: &refusingTransport{InmemTransport: trans}, fsm: &countFSM{}}
		nodes = append(nodes, n)
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: n.id, Address: addr})
	}
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				a.trans.Connect(b.addr, b.trans.InmemTransport)
			}
		}
	}
	for _, n := range nodes {
		dir := t.TempDir()
		store, err := openStore(dir, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		files, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		mark := &snapshotMark{}
		logger := testLogger(t).With("node", n.id)
		logs := suffixKeepingLogStore{store, mark, logger}
		snaps := markingSnapshotStore{files, mark}
		rc := raft.DefaultConfig()
		rc.LocalID = n.id
		rc.Logger = newHCLogger(logger)
		// raft's own defaults: each test follows one leader through a
		// scripted sequence, and the shorter timeouts of the other tests
		// let a loaded machine (the whole suite on two cores) depose it
		// midway.
		rc.HeartbeatTimeout = time.Second
		rc.ElectionTimeout = time.Second
		rc.LeaderLeaseTimeout = 500 * time.Millisecond
		rc.CommitTimeout = 5 * time.Millisecond
		rc.TrailingLogs = 0
		rc.SnapshotThreshold = 1 << 30
		rc.SnapshotInterval = time.Hour
		if err := raft.BootstrapCluster(rc, logs, store, snaps, n.trans, conf); err != nil {
			t.Fatal(err)
		}
		r, err := raft.NewRaft(rc, n.fsm, logs, store, snaps, n.trans)
		if err != nil {
			t.Fatal(err)
		}
		n.r = r
		mark.follow(r)
		t.Cleanup(func() {
			if err := r.Shutdown().Error(); err != nil {
				t.Error(err)
			}
			_ = n.trans.Close()
			_ = store.Close()
		})
	}
	return nodes
}

func rawLeader(t *testing.T, nodes []*rawNode) *rawNode {
	t.Helper()
	var leader *rawNode
	eventually(t, "a leader", func() bool {
		leader = nil
		for _, n := range nodes {
			if n.r.State() == raft.Leader {
				leader = n
			}
		}
		return leader != nil
	})
	return leader
}

func applyN(t *testing.T, leader *rawNode, k int) {
	t.Helper()
	for range k {
		if err := leader.r.Apply([]byte("x"), 10*time.Second).Error(); err != nil {
			t.Fatal(err)
		}
	}
}

// caughtUp waits until every node applied as far as the leader's last
// index and counts as many commands.
func caughtUp(t *testing.T, leader *rawNode, nodes []*rawNode) {
	t.Helper()
	last := leader.r.LastIndex()
	eventually(t, fmt.Sprintf("every node applied through %d", last), func() bool {
		for _, n := range nodes {
			if n.r.AppliedIndex() < last || n.fsm.count() != leader.fsm.count() {
				return false
			}
		}
		return true
	})
}

// followerAhead starts a cluster, has the leader send one follower its
// snapshot while that follower's log runs 11 entries past it, and waits
// until the follower installed it. It returns the nodes, the leader, that
// follower and the other follower. With lagging, the follower is cut off
// until the leader took its snapshot, installs it, and then gets the
// entries after it: its log starts right after the snapshot the leader
// sends it again.
func followerAhead(t *testing.T, lagging bool) (nodes []*rawNode, leader, follower, other *rawNode) {
	t.Helper()
	nodes = rawCluster(t)
	leader = rawLeader(t, nodes)
	for _, n := range nodes {
		switch {
		case n == leader:
		case follower == nil:
			follower = n
		default:
			other = n
		}
	}
	if lagging {
		leader.trans.Disconnect(follower.addr)
	}
	applyN(t, leader, 20)
	if err := leader.r.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	snapIndex := leader.r.LastIndex()
	if lagging {
		leader.trans.Connect(follower.addr, follower.trans.InmemTransport)
		eventually(t, "the lagging follower installed the leader's snapshot", func() bool {
			return follower.fsm.restored() == 1
		})
	}
	applyN(t, leader, 10)
	caughtUp(t, leader, nodes)

	// The follower stores the next entry; the leader hears a refusal from
	// an empty log and sends it the snapshot (which may be installed
	// before the entry's Apply returns: count the installs first).
	installs := follower.fsm.restored() + 1
	leader.trans.refuse.Store(&follower.id)
	applyN(t, leader, 1)
	eventually(t, "the follower installed the leader's snapshot", func() bool {
		return follower.fsm.restored() >= installs && follower.r.Stats()["last_snapshot_index"] == fmt.Sprint(snapIndex)
	})
	return nodes, leader, follower, other
}

// The follower keeps the entries after the snapshot, so the leader's
// next append, right after the snapshot, finds them: the follower catches
// up instead of having the leader resend the snapshot forever
// (hashicorp/raft#697).
func TestFollowerAheadOfAnInstalledSnapshotCatchesUp(t *testing.T) {
	for _, lagging := range []bool{false, true} {
		t.Run(fmt.Sprintf("lagging=%v", lagging), func(t *testing.T) {
			nodes, leader, follower, _ := followerAhead(t, lagging)
			// Raft applies the kept entries at the next commit.
			applyN(t, leader, 5)
			caughtUp(t, leader, nodes)
			if got, want := follower.fsm.count(), uint64(36); got != want {
				t.Fatalf("follower applied %d commands, want %d", got, want)
			}
		})
	}
}

// A new leader appends right after the follower's last entry, which raft
// takes as a match: the follower then commits and applies the entries
// after the snapshot, which it must still hold (hashicorp/raft#697: raft
// panics with `log not found`).
func TestFollowerAheadOfAnInstalledSnapshotUnderANewLeader(t *testing.T) {
	for _, lagging := range []bool{false, true} {
		t.Run(fmt.Sprintf("lagging=%v", lagging), func(t *testing.T) {
			nodes, leader, follower, other := followerAhead(t, lagging)
			if err := leader.r.LeadershipTransferToServer(other.id, other.addr).Error(); err != nil {
				t.Fatal(err)
			}
			// The old leader may report itself leader a while after the
			// transfer; wait until the new one leads alone.
			old := leader
			eventually(t, "the transfer's target leads alone", func() bool {
				return other.r.State() == raft.Leader && old.r.State() != raft.Leader
			})
			leader = other
			applyN(t, leader, 5)
			caughtUp(t, leader, nodes)
			if got, want := follower.fsm.count(), uint64(36); got != want {
				t.Fatalf("follower applied %d commands, want %d", got, want)
			}
		})
	}
}
