package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCLIRunStopsTree: SIGTERM to `leasehold run` stops its command's
// children too, and the lock is free only once they are gone; kill -9 of
// `leasehold run` kills them as well.
func TestCLIRunStopsTree(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			name := "tree-" + strconv.Itoa(int(sig))
			const script = `sleep 30 & echo $! > "$DIR/a"; sleep 30 & echo $! > "$DIR/b"; echo go > "$DIR/ready"; wait`
			cmd := exec.Command(leaseholdBin, "run", name, "--ttl", "5s", "--endpoints", srv.Addr, "--", "sh", "-c", script)
			cmd.Env = binEnv("DIR=" + dir)
			var stderr syncBuffer
			cmd.Stderr = &stderr
			done := startGroup(t, cmd)
			eventually(t, 30*time.Second, "the command to start its children", func() bool {
				return readFile(t, filepath.Join(dir, "ready")) != ""
			})
			var pids []int
			for _, f := range []string{"a", "b"} {
				pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(dir, f))))
				if err != nil {
					t.Fatal(err)
				}
				pids = append(pids, pid)
				t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
			}
			if err := syscall.Kill(cmd.Process.Pid, sig); err != nil {
				t.Fatal(err)
			}
			if code := exitStatus(t, done, 15*time.Second, "leasehold run"); sig == syscall.SIGTERM && code != 128+int(sig) {
				t.Errorf("run exited %d, want 143\nstderr: %s", code, stderr.String())
			}
			if sig == syscall.SIGKILL {
				eventually(t, 30*time.Second, "the command's children to die with run", func() bool {
					return !processLive(pids[0]) && !processLive(pids[1])
				})
				return
			}
			for _, pid := range pids {
				if processLive(pid) {
					t.Errorf("child %d of the command outlived leasehold run", pid)
				}
			}
			checkNoRace(t, "leasehold run", stderr.String())
			if st := srv.status(t, name); st.Held {
				t.Errorf("after run ended: %+v, want free", st)
			}
		})
	}
}

// processLive reports whether pid exists and is not a zombie.
func processLive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && len(b) > i+2 && b[i+2] != 'Z'
}
