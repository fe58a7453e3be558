//go:build leasehold_faults

package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// mountTmpfs mounts a tmpfs of size bytes on a new directory (unmounted,
// lazily, in cleanup). It fails the test when it cannot: the schedule
// needs root, as CI has.
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Fatalf("mount a %d-byte tmpfs on %s (the disk-full schedule needs root): %v", size, dir, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// fill creates dir/filler taking all but leave bytes of dir's free space.
func fill(t *testing.T, dir string, leave int64) string {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if free > leave {
		if err := syscall.Fallocate(int(f.Fd()), 0, 0, free-leave); err != nil {
			t.Fatalf("fill %s with %d bytes: %v", dir, free-leave, err)
		}
	}
	return path
}

// appliedIndex is the applied index n's /metrics report, or 0.
func (n *node) appliedIndex(ctx context.Context) uint64 {
	v, _ := servertest.ReadMetric(ctx, n.apiAddr(), "leasehold_raft_applied_index")
	return uint64(v)
}

// TestDiskFull is a disk-full schedule: one node's data dir is on a 192
// MiB tmpfs that fills up under load (a filler file, then 64 KiB writes),
// first while the node leads, then, after it caught up again, while it
// follows. The node must stop by itself with an error that says so (exit
// status 12, no panic), the two others must keep serving, no acknowledged
// write may be lost, and once space is freed the node, started again on
// its data dir, must catch up. As leader, the writes in flight when its
// append failed must be told so (never internal).
func TestDiskFull(t *testing.T) {
	c := startCluster(t)
	ctx := t.Context()
	keys := append([]string{"f:big"}, names...)
	o := observe(c.endpoints(), "f:", keys)
	var cnt counters
	until := time.Now().Add(22 * time.Second)
	ps := load(t, c, 4, until)
	time.Sleep(time.Second)
	v := others(c, c.mustLeader(ctx))[0]
	c.kill(v)
	// Room for two new raft-wal segments (64 MiB each, preallocated) once
	// the filler is gone: a node that restarts with a conflicting tail
	// creates one when it removes that tail.
	mnt := mountTmpfs(t, 192<<20)
	if out, err := exec.Command("cp", "-a", "--sparse=always", v.dir+"/.", mnt).CombinedOutput(); err != nil {
		t.Fatalf("copy %s's data dir to the tmpfs: %v\n%s", v.id, err, out)
	}
	v.dir = mnt
	c.start(v)
	c.waitReady(v, 20*time.Second)
	var mine []rec
	for i, role := range []string{"leader", "follower"} {
		if role == "leader" {
			c.makeLeader(ctx, v, 15*time.Second)
		} else if c.leader(ctx, c.nodes) == v {
			c.makeLeader(ctx, others(c, v)[0], 15*time.Second)
		}
		mine = append(mine, fillUp(ctx, t, c, v, mnt, role, fmt.Sprintf("big%d", i), &cnt)...)
	}
	t.Logf("both rounds done %v before the load ends", time.Until(until).Round(time.Millisecond))
	waitAll(t, ps, time.Until(until)+10*time.Second)
	h := collect(t, o, c.endpoints(), keys, ps, mine...)
	cnt.snapshotInstalls = c.snapshotInstalls()
	report(t, h, &cnt, o, "leader-changes")
}

// fillUp fills the tmpfs mnt that holds v's data dir while v has role
// (leader or follower), writing 64 KiB values as proc through the cluster
// until v stops, and checks how v stopped and that the two others keep
// serving; then it frees the space, starts v again, and checks that it
// catches up. It returns the writes as records and appends the time the
// others took to confirm a leader to cnt's failover.
func fillUp(ctx context.Context, t *testing.T, c *cluster, v *node, mnt, role, proc string, cnt *counters) []rec {
	t.Helper()
	logged := func() string { b, _ := os.ReadFile(v.logPath); return string(b) }
	before := len(logged())
	filler := fill(t, mnt, 1<<20)
	full := time.Now()

	// 64 KiB writes until the node's disk refuses one. Writes after that
	// would be what the node must store when it catches up, in the space
	// the filler leaves: a fast machine could fill it again.
	v.mu.Lock()
	cmd := v.cmd
	v.mu.Unlock()
	refused := func() bool { return strings.Contains(logged()[before:], "no space left on device") }
	mine := writeUntil(ctx, t, c.endpoints(), "f:big", proc, 64<<10, func() bool { return v.exited() || refused() || time.Since(full) > 20*time.Second })
	if !c.awaitExit(v, max(20*time.Second-time.Since(full), time.Second)) {
		t.Fatalf("%s (%s) still runs 20 s after its disk filled up", v.id, role)
	}
	log := logged()[before:]
	// A refused append stops the node with status 12 (unavailable); a
	// refused term or vote ends it at once with status 1, saying so.
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case !ok || ws.Signaled():
		t.Errorf("%s (%s) ended with %v; want exit status 12", v.id, role, cmd.ProcessState)
	case ws.ExitStatus() == 12:
	case ws.ExitStatus() == 1 && strings.Contains(log, "leasehold: raftnode: the data dir refused a write"):
		t.Logf("%s (%s): its term or vote was refused first: exit status 1", v.id, role)
	default:
		t.Errorf("%s (%s) ended with %v; want exit status 12", v.id, role, cmd.ProcessState)
	}
	if !strings.Contains(log, "no space left on device") {
		t.Errorf("%s's log does not say its disk is full (%s)", v.id, role)
	}
	t.Logf("%s (%s) stopped (%v) %v after its disk filled up", v.id, role, cmd.ProcessState, time.Since(full).Round(time.Millisecond))
	if role == "leader" {
		// The writes in flight when the append failed are told so.
		said := 0
		for _, r := range mine {
			if r.Code != "" && strings.Contains(r.Msg, "no space left on device") {
				if said == 0 {
					t.Logf("a write in flight: %s: %s", r.Code, r.Msg)
				}
				said++
			}
		}
		if said == 0 {
			t.Errorf("no write in flight on %s was told its disk is full", v.id)
		}
	}
	_, took := c.awaitLeader(ctx, others(c, v), leaderBound)
	cnt.failover = append(cnt.failover, took)

	// Space freed: the node starts again on its data dir and catches up.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// The leader retries a follower whose appends failed with a backoff
	// that doubles up to about 10 s (hashicorp/raft's replication), so
	// catching up may take two such waits; and a follower is ready only once
	// its state names the leader's API address, which a node with no
	// snapshot learns by applying its log again.
	c.start(v)
	c.waitReady(v, 45*time.Second)
	target := c.mustLeader(ctx).appliedIndex(ctx)
	restarted := time.Now()
	deadline := restarted.Add(30 * time.Second)
	for v.appliedIndex(ctx) < target && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := v.appliedIndex(ctx); got < target {
		t.Errorf("%s (%s) applied index %d 30 s after its restart, want ≥ %d", v.id, role, got, target)
	} else {
		t.Logf("%s (%s) caught up %v after its restart", v.id, role, time.Since(restarted).Round(time.Millisecond))
	}
	return mine
}

// writeUntil holds name through eps as proc and writes its KV key with
// the token, values "proc-i" padded to size bytes, until stop, returning
// what it did as records.
func writeUntil(ctx context.Context, t *testing.T, eps, name, proc string, size int, stop func() bool) []rec {
	t.Helper()
	cl, err := client.Dial(ctx, eps)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	s, err := cl.NewSession(ctx, client.WithTTL(5*time.Second), client.WithOwner(proc))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(ctx) }()
	sent := time.Now()
	l, err := s.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	out := []rec{{K: "grant", Proc: proc, Name: name, Lease: l.LeaseID(), Token: l.Token(), Sent: sent.UnixNano(), Ret: time.Now().UnixNano()}}
	r := &recorder{proc: proc}
	for i := 0; !stop(); i++ {
		v := fmt.Sprintf("%s-%d", proc, i)
		if len(v) < size {
			v += "-" + strings.Repeat("x", size-len(v)-1)
		}
		out = append(out, r.put(ctx, cl, name, v, l.Token()))
	}
	return out
}
