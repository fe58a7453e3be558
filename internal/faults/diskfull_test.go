//go:build leasehold_faults

package faults

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.apiAddr()+"/metrics", nil)
	if err != nil {
		return 0
	}
	resp, err := (&http.Client{Timeout: time.Second}).Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "leasehold_raft_applied_index "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return uint64(f)
		}
	}
	return 0
}

// TestDiskFull is a disk-full schedule: the leader's data dir is on a 32 MiB tmpfs
// that fills up under load (a filler file, then 64 KiB writes). The node
// must stop by itself with an error that says so (no panic), its clients
// must see no internal, the two others must keep serving, no
// acknowledged write may be lost, and once space is freed the node,
// started again on its data dir, must catch up.
func TestDiskFull(t *testing.T) {
	c := startCluster(t)
	ctx := t.Context()
	keys := append([]string{"f:big"}, names...)
	o := observe(c.endpoints(), "f:", keys)
	var cnt counters
	until := time.Now().Add(26 * time.Second)
	ps := load(t, c, 4, until)
	time.Sleep(time.Second)
	v := others(c, c.mustLeader(ctx))[0]
	c.kill(v)
	mnt := mountTmpfs(t, 32<<20)
	if out, err := exec.Command("cp", "-a", "--sparse=always", v.dir+"/.", mnt).CombinedOutput(); err != nil {
		t.Fatalf("copy %s's data dir to the tmpfs: %v\n%s", v.id, err, out)
	}
	v.dir = mnt
	c.start(v)
	c.waitReady(v, 20*time.Second)
	c.makeLeader(ctx, v, 15*time.Second)
	filler := fill(t, mnt, 1<<20)
	full := time.Now()

	// 64 KiB writes until the node stops.
	v.mu.Lock()
	cmd := v.cmd
	v.mu.Unlock()
	mine := writeUntil(ctx, t, c.endpoints(), "f:big", "big", 64<<10, func() bool { return v.exited() || time.Since(full) > 20*time.Second })
	if !c.awaitExit(v, time.Second) {
		t.Fatalf("%s still runs 20 s after its disk filled up", v.id)
	}
	log, _ := os.ReadFile(v.logPath)
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signaled() || ws.ExitStatus() == 0 {
		t.Errorf("%s ended with %v; want an exit status > 0", v.id, cmd.ProcessState)
	}
	if !strings.Contains(string(log), "no space left on device") {
		t.Errorf("%s's log does not say its disk is full", v.id)
	}
	t.Logf("%s stopped %v after its disk filled up", v.id, time.Since(full).Round(time.Millisecond))
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
	_, took := c.awaitLeader(ctx, others(c, v), leaderBound)
	cnt.failover = append(cnt.failover, took)

	// Space freed: the node starts again on its data dir and catches up.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	c.start(v)
	c.waitReady(v, 20*time.Second)
	target := c.mustLeader(ctx).appliedIndex(ctx)
	deadline := time.Now().Add(15 * time.Second)
	for v.appliedIndex(ctx) < target && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := v.appliedIndex(ctx); got < target {
		t.Errorf("%s applied index %d 15 s after its restart, want ≥ %d", v.id, got, target)
	}
	waitAll(t, ps, time.Until(until)+10*time.Second)
	h := collect(t, o, c.endpoints(), keys, ps, mine...)
	cnt.snapshotInstalls = c.snapshotInstalls()
	report(t, h, &cnt, o, "leader-changes")
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
