package raftnode

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestReopenRecoversState: every acknowledged command survives Close and a
// reopen of the same data dir, and the token counter continues above every
// token issued before.
func TestReopenRecoversState(t *testing.T) {
	dir := t.TempDir()
	n := open(t, testConfig(t, dir))
	waitLeader(t, n)
	last := populate(t, n)
	before, _ := state(t, n)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	n = open(t, testConfig(t, dir))
	waitLeader(t, n)
	waitFloorRaised(t, n)
	after, token := state(t, n)
	if !bytes.Equal(withoutHeader(t, before), withoutHeader(t, after)) {
		t.Fatal("the reopened node's state differs from the state before Close")
	}
	// The restart floor raised the counter; only order is promised.
	if token <= last {
		t.Fatalf("token counter %d after reopen, want above %d", token, last)
	}
	checkPopulated(t, n)
	mustApply(t, n, create("s4", 5000))
	if got := mustApply(t, n, acquire("c", "s4", 0)).Holding.GetToken(); got <= last {
		t.Fatalf("first grant after reopen has token %d, not above %d", got, last)
	}
}

// TestReadIndexRightAfterRestart: the first linearizable read a restarted
// leader serves already sees every entry committed before the restart.
func TestReadIndexRightAfterRestart(t *testing.T) {
	dir := t.TempDir()
	n := open(t, testConfig(t, dir))
	waitLeader(t, n)
	last := populate(t, n)
	for i := range 5 {
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		n = open(t, testConfig(t, dir))
		eventually(t, "ReadIndex to succeed", func() bool { return n.ReadIndex(ctxT(t)) == nil })
		// The restart floor may already have raised the counter.
		if _, token := state(t, n); token < last {
			t.Fatalf("restart %d: the first read after ReadIndex saw token %d, want at least %d", i, token, last)
		}
	}
}

// TestSnapshotRestore: state recovered from a snapshot plus the log after it
// equals the state before, and tokens keep increasing.
func TestSnapshotRestore(t *testing.T) {
	t.Run("explicit", func(t *testing.T) {
		dir := t.TempDir()
		cfg := testConfig(t, dir)
		cfg.TrailingLogs = 0 // compact everything the snapshot covers
		n := open(t, cfg)
		waitLeader(t, n)
		populate(t, n)
		if err := n.Raft().Snapshot().Error(); err != nil {
			t.Fatal(err)
		}
		// Entries after the snapshot are replayed from the log on reopen.
		mustApply(t, n, create("s5", 5000))
		last := mustApply(t, n, acquire("d", "s5", 0)).Holding.GetToken()
		before, _ := state(t, n)
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		snaps, err := os.ReadDir(filepath.Join(dir, "snapshots"))
		if err != nil || len(snaps) == 0 {
			t.Fatalf("no snapshot in the data dir: %v %v", snaps, err)
		}

		n = open(t, cfg)
		waitLeader(t, n)
		waitFloorRaised(t, n)
		if idx, _ := strconv.ParseUint(n.Raft().Stats()["last_snapshot_index"], 10, 64); idx == 0 {
			t.Fatal("the reopened node knows no snapshot")
		}
		after, token := state(t, n)
		if !bytes.Equal(withoutHeader(t, before), withoutHeader(t, after)) {
			t.Fatal("the state restored from snapshot and log differs from the state before Close")
		}
		checkPopulated(t, n)
		if got := mustApply(t, n, acquire("e", "s5", 0)).Holding.GetToken(); got <= token || token <= last {
			t.Fatalf("counter %d (want above %d), next grant %d", token, last, got)
		}
	})
	t.Run("threshold", func(t *testing.T) {
		dir := t.TempDir()
		cfg := testConfig(t, dir)
		cfg.SnapshotInterval = 10 * time.Millisecond
		cfg.SnapshotThreshold = 4
		cfg.TrailingLogs = 0
		n := open(t, cfg)
		waitLeader(t, n)
		last := populate(t, n)
		eventually(t, "an automatic snapshot", func() bool {
			idx, _ := strconv.ParseUint(n.Raft().Stats()["last_snapshot_index"], 10, 64)
			return idx > 0
		})
		before, _ := state(t, n)
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		n = open(t, cfg)
		waitLeader(t, n)
		waitFloorRaised(t, n)
		after, token := state(t, n)
		if eq := bytes.Equal(withoutHeader(t, before), withoutHeader(t, after)); !eq || token <= last {
			t.Fatalf("restored token %d (want above %d); states equal: %v", token, last, eq)
		}
	})
}

func TestReadIndexOnLeader(t *testing.T) {
	n := open(t, testConfig(t, t.TempDir()))
	waitLeader(t, n)
	mustApply(t, n, create("s1", 5000))
	if err := n.ReadIndex(ctxT(t)); err != nil {
		t.Fatalf("ReadIndex on the leader: %v", err)
	}
	_, token := state(t, n)
	res := mustApply(t, n, acquire("a", "s1", 0))
	if err := n.ReadIndex(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if _, now := state(t, n); now != res.Holding.GetToken() || now <= token {
		t.Fatalf("token after ReadIndex %d, want %d", now, res.Holding.GetToken())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := n.ReadIndex(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("ReadIndex with a cancelled context: %v, want ErrUnavailable", err)
	}
	if id, _ := n.Leader(); id != n.ID() {
		t.Fatalf("Leader() = %q, want %q", id, n.ID())
	}
}

func TestApplyErrors(t *testing.T) {
	n := open(t, testConfig(t, t.TempDir()))
	waitLeader(t, n)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := n.Apply(ctx, create("s1", 5000)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Apply with a cancelled context: %v, want ErrUnavailable", err)
	}
	if _, token := state(t, n); token != 0 {
		t.Fatalf("token %d after a cancelled apply", token)
	}

	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := n.Apply(ctxT(t), create("s2", 5000)); !errors.Is(err, ErrShutdown) {
		t.Fatalf("Apply on a closed node: %v, want ErrShutdown", err)
	}
	if err := n.ReadIndex(ctxT(t)); !errors.Is(err, ErrShutdown) {
		t.Fatalf("ReadIndex on a closed node: %v, want ErrShutdown", err)
	}
}

func TestConfigValidate(t *testing.T) {
	base := DefaultConfig()
	base.DataDir = "/nonexistent"
	if err := base.Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		valid  bool
	}{
		{"no node id", func(c *Config) { c.NodeID = "" }, false},
		{"no data dir", func(c *Config) { c.DataDir = "" }, false},
		{"no logger", func(c *Config) { c.Logger = nil }, false},
		{"cluster without address", func(c *Config) { c.Bootstrap = []Peer{{"n1", "a"}, {"n2", "b"}} }, false},
		{"join without address", func(c *Config) { c.Join = true }, false},
		{"join with address", func(c *Config) { c.Join = true; c.RaftAddr = "127.0.0.1:0" }, true},
		{"join and bootstrap", func(c *Config) { c.Join = true; c.RaftAddr = "x:1"; c.Bootstrap = []Peer{{"n1", "x:1"}} }, false},
		{"bootstrap without self", func(c *Config) { c.RaftAddr = "x:1"; c.Bootstrap = []Peer{{"n2", "y:1"}, {"n3", "z:1"}} }, false},
		{"zero leader lease", func(c *Config) { c.LeaderLeaseTimeout = 0 }, false},
		{"leader lease above heartbeat", func(c *Config) { c.LeaderLeaseTimeout = c.HeartbeatTimeout + 1 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.mutate(&c)
			if err := c.Validate(); (err == nil) != tc.valid {
				t.Fatalf("Validate() = %v, want valid=%v", err, tc.valid)
			}
		})
	}
}
