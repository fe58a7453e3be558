package raftnode

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// base is the wall clock of the tests' stamped commands (ms).
const base = int64(1_700_000_000_000)

func stamped(ms int64, cmd *fsmpb.Command) *fsmpb.Command {
	cmd.UnixMs = ms
	return cmd
}

func fixedNow(ms int64) func() time.Time { return func() time.Time { return time.UnixMilli(ms) } }

// grantBurst creates a session and grants it n names, all stamped ms; it
// returns the newest token.
func grantBurst(t *testing.T, nd *Node, lease string, n int, ms int64) uint64 {
	t.Helper()
	mustApply(t, nd, stamped(ms, create(lease, 60_000)))
	var last uint64
	for i := range n {
		last = mustApply(t, nd, stamped(ms, acquire(lease+"-"+string(rune('a'+i)), lease, 0))).Holding.GetToken()
	}
	return last
}

// TestRestartRaisesFloorBeforeAnyGrant: a node restarted from its data dir
// raises the counter by (now − newest grant stamp) × the rate bound before
// its first grant, even a grant proposed the moment it leads.
func TestRestartRaisesFloorBeforeAnyGrant(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	cfg.Now = fixedNow(base)
	n := open(t, cfg)
	waitLeader(t, n)
	last := grantBurst(t, n, "s1", 3, base)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.Now = fixedNow(base + 10_000) // 10 s later: at least 10 000 tokens could have been issued
	n = open(t, cfg)
	waitLeader(t, n)
	got := mustApply(t, n, stamped(base+10_000, acquire("after", "s1", 0))).Holding.GetToken()
	if want := last + 10*fsm.MinFloorRate + 2; got < want {
		t.Fatalf("first grant after the restart has token %d, want at least %d (newest before %d)", got, want, last)
	}
}

// TestHandCopiedDataDir: an old copy of a data dir, started after the
// original went on granting, never reissues a token the original issued
// while the copy's clock bound holds.
func TestHandCopiedDataDir(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	cfg.Now = fixedNow(base)
	n := open(t, cfg)
	waitLeader(t, n)
	grantBurst(t, n, "s1", 2, base)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	backup := t.TempDir()
	copyDir(t, dir, backup)
	// The original lives on: 50 more grants within the next second.
	n = open(t, cfg)
	waitLeader(t, n)
	newest := grantBurst(t, n, "s2", 50, base+900)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	// The original is lost; the old copy starts a second after its end.
	cfg.DataDir = backup
	cfg.Now = fixedNow(base + 1_000)
	n = open(t, cfg)
	waitLeader(t, n)
	mustApply(t, n, stamped(base+1_000, create("s3", 60_000)))
	if got := mustApply(t, n, acquire("x", "s3", 0)).Holding.GetToken(); got <= newest {
		t.Fatalf("the old copy granted token %d; the lost original had issued up to %d", got, newest)
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o700)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), data, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLiveFailoverDoesNotRaiseFloor: nodes that never restarted hand
// leadership over without a floor: the next grant is the next token.
func TestLiveFailoverDoesNotRaiseFloor(t *testing.T) {
	c := newCluster(t, 3)
	leader := waitLeader(t, c.nodes...)
	mustApply(t, leader, create("s1", 60_000))
	last := mustApply(t, leader, acquire("a", "s1", 0)).Holding.GetToken()
	c.converge(leader)
	c.kill(leader)
	leader = waitLeader(t, c.live()...)
	if got := mustApply(t, leader, acquire("b", "s1", 0)).Holding.GetToken(); got != last+1 {
		t.Fatalf("grant after a live failover has token %d, want %d", got, last+1)
	}
}

// TestBackupRestore: a backup restored into a new data dir starts above
// every token the lost cluster issued after the backup (within the rate
// bound), keeps the fenced KV, drops the lost cluster's sessions, and its
// floor is in place before the node first serves.
func TestBackupRestore(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Now = fixedNow(base)
	n := open(t, cfg)
	waitLeader(t, n)
	tok := grantBurst(t, n, "s1", 3, base)
	mustApply(t, n, stamped(base, kvPut("k", "v1", tok)))
	meta, rc, err := n.Backup(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || int64(len(snap)) != meta.Size {
		t.Fatalf("backup: %d bytes, meta says %d: %v", len(snap), meta.Size, err)
	}
	// After the backup the cluster goes on, and a resource accepts a write
	// with the newest token; then the cluster is lost.
	newest := grantBurst(t, n, "s2", 100, base+1_500)
	mustApply(t, n, stamped(base+1_500, kvPut("k", "v2", newest)))
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	rcfg := testConfig(t, filepath.Join(t.TempDir(), "restored"))
	rcfg.Now = fixedNow(base + 2_000)
	var clock fsm.GrantClock
	res, err := Restore(ctxT(t), rcfg, Snapshot{Stream: bytes.NewReader(snap), Size: int64(len(snap)), Index: meta.Index}, func(g fsm.GrantClock) (uint64, error) {
		clock = g
		return g.Floor(base + 2_000), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if clock.Token != tok || clock.LastGrantUnixMs != base || res.Floor <= newest {
		t.Fatalf("restore: clock %+v, floor %d; want the backup's clock and a floor above %d", clock, res.Floor, newest)
	}
	if res.Index <= meta.Index {
		t.Fatalf("the restored log ends at index %d, not above the backup's %d", res.Index, meta.Index)
	}
	r := open(t, rcfg)
	waitLeader(t, r)
	r.Read(func(m *fsm.Machine) {
		if m.Session("s1") != nil {
			t.Error("the lost cluster's session survived the restore")
		}
		if e := m.KV("k"); string(e.GetValue()) != "v1" || e.GetToken() != tok {
			t.Errorf("KV k = %v, want v1 at token %d", e, tok)
		}
	})
	mustApply(t, r, stamped(base+2_000, create("s3", 60_000)))
	if got := mustApply(t, r, acquire("x", "s3", 0)).Holding.GetToken(); got <= newest {
		t.Fatalf("the restored cluster granted token %d; the lost one had issued up to %d", got, newest)
	}
}

func TestRestoreRefuses(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	n := open(t, cfg)
	waitLeader(t, n)
	mustApply(t, n, create("s1", 5000))
	meta, rc, err := n.Backup(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	snap, _ := io.ReadAll(rc)
	rc.Close()
	auto := func(g fsm.GrantClock) (uint64, error) { return g.Floor(base), nil }
	// A data dir in use is never overwritten.
	if _, err := Restore(ctxT(t), testConfig(t, cfg.DataDir), Snapshot{Stream: bytes.NewReader(snap), Size: meta.Size}, auto); err == nil {
		t.Fatal("restore into a non-empty data dir succeeded")
	}
	// The floor function's refusal ends the restore.
	errNoFloor := errors.New("no floor")
	_, err = Restore(ctxT(t), testConfig(t, filepath.Join(t.TempDir(), "d")), Snapshot{Stream: bytes.NewReader(snap), Size: meta.Size}, func(fsm.GrantClock) (uint64, error) { return 0, errNoFloor })
	if !errors.Is(err, errNoFloor) {
		t.Fatalf("restore without a floor: %v", err)
	}
	// A damaged stream is refused.
	bad := bytes.Clone(snap)
	bad[len(bad)-1] ^= 0xff
	if _, err := Restore(ctxT(t), testConfig(t, filepath.Join(t.TempDir(), "e")), Snapshot{Stream: bytes.NewReader(bad), Size: meta.Size}, auto); err == nil {
		t.Fatal("restore of a damaged snapshot succeeded")
	}
}
