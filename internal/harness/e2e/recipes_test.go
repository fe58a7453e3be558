package e2e

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// holderScript is the command a recipe holder runs under `leasehold run`
// or `leasehold elect`: it records its pid, token (or epoch) and slot,
// waits for the file go (or exit), makes one fenced write with its token
// under KEY (KEY/slot/SLOT when SLOTTED is set), records the outcome, and
// waits for exit. Every wait is bounded, so it ends by itself.
const holderScript = `echo "$$ $LEASEHOLD_TOKEN $LEASEHOLD_SLOT" > "$DIR/started.tmp" && mv "$DIR/started.tmp" "$DIR/started"
i=0; while [ ! -e "$DIR/go" ] && [ ! -e "$DIR/exit" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
key="$KEY"; [ -n "$SLOTTED" ] && key="$KEY/slot/$LEASEHOLD_SLOT"
if [ -e "$DIR/go" ]; then
  "$LEASEHOLD_BIN" kv put "$key" "$WHO" --token "$LEASEHOLD_TOKEN" -o json > "$DIR/put" 2>&1
  echo $? > "$DIR/rc.tmp" && mv "$DIR/rc.tmp" "$DIR/rc"
fi
i=0; while [ ! -e "$DIR/exit" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
exit 0`

// recipeHolder is one `leasehold run` or `elect` process and its command.
type recipeHolder struct {
	t      *testing.T
	name   string
	dir    string
	cmd    *exec.Cmd
	stderr *syncBuf
	done   chan struct{} // closed when cmd was waited for
	err    error         // cmd's exit, set before done is closed

	// set by started
	pid   int // the command's pid
	token uint64
	slot  uint64
}

type syncBuf struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startHolder starts `leasehold ARGS... -- sh -c holderScript` against eps;
// the command writes under key (per slot when slotted).
func startHolder(t *testing.T, name, eps, key string, slotted bool, args ...string) *recipeHolder {
	t.Helper()
	h := &recipeHolder{t: t, name: name, dir: t.TempDir(), stderr: &syncBuf{}, done: make(chan struct{})}
	argv := append(append([]string{}, args...), "--endpoints", eps, "--", "sh", "-c", holderScript)
	h.cmd = exec.Command(binary, argv...)
	h.cmd.Env = append(os.Environ(), "DIR="+h.dir, "KEY="+key, "WHO="+name, "LEASEHOLD_BIN="+binary, "LEASEHOLD_ENDPOINTS="+eps)
	if slotted {
		h.cmd.Env = append(h.cmd.Env, "SLOTTED=1")
	}
	h.cmd.Stderr = h.stderr
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		h.err = h.cmd.Wait()
		close(h.done)
	}()
	t.Cleanup(func() {
		// Stopped or not, SIGKILL ends the process; its command is
		// killed with it (parent death), and by its pid here.
		_ = h.cmd.Process.Signal(syscall.SIGKILL)
		<-h.done
		if h.pid != 0 {
			_ = syscall.Kill(h.pid, syscall.SIGKILL)
		}
		if t.Failed() {
			t.Logf("%s stderr:\n%s", h.name, tail(h.stderr.String(), 2000))
		}
	})
	return h
}

func (h *recipeHolder) file(name string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(h.dir, name))
	return strings.TrimSpace(string(b)), err == nil
}

func (h *recipeHolder) touch(name string) {
	h.t.Helper()
	if err := os.WriteFile(filepath.Join(h.dir, name), nil, 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// isStarted reports whether the command runs (the lock was granted).
func (h *recipeHolder) isStarted() bool {
	_, ok := h.file("started")
	return ok
}

// started waits for the grant and reads the command's pid, token and slot.
func (h *recipeHolder) started() *recipeHolder {
	h.t.Helper()
	waitLong(h.t, h.name+" to be granted", 30*time.Second, h.isStarted)
	s, _ := h.file("started")
	f := strings.Fields(s)
	if len(f) != 3 {
		h.t.Fatalf("%s started file %q", h.name, s)
	}
	var err error
	if h.pid, err = strconv.Atoi(f[0]); err == nil {
		if h.token, err = strconv.ParseUint(f[1], 10, 64); err == nil {
			h.slot, err = strconv.ParseUint(f[2], 10, 64)
		}
	}
	if err != nil {
		h.t.Fatalf("%s started file %q: %v", h.name, s, err)
	}
	return h
}

// write lets the command make its fenced write and returns its exit
// status and output.
func (h *recipeHolder) write() (int, string) {
	h.t.Helper()
	h.touch("go")
	waitLong(h.t, h.name+"'s write", 30*time.Second, func() bool { _, ok := h.file("rc"); return ok })
	rc, _ := h.file("rc")
	out, _ := h.file("put")
	code, err := strconv.Atoi(rc)
	if err != nil {
		h.t.Fatalf("%s rc %q", h.name, rc)
	}
	return code, out
}

// pause freezes the leasehold process and its command (SIGSTOP), as a
// stalled machine would be.
func (h *recipeHolder) pause() {
	h.t.Helper()
	for _, pid := range []int{h.cmd.Process.Pid, h.pid} {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			h.t.Fatal(err)
		}
	}
}

func (h *recipeHolder) cont(pid int) {
	h.t.Helper()
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		h.t.Fatal(err)
	}
}

// exit waits for the leasehold process to end and returns its status.
func (h *recipeHolder) exit(d time.Duration) int {
	h.t.Helper()
	select {
	case <-h.done:
	case <-time.After(d):
		h.t.Fatalf("%s did not exit within %v; stderr: %s", h.name, d, h.stderr.String())
	}
	var ee *exec.ExitError
	if errors.As(h.err, &ee) {
		return ee.ExitCode()
	}
	if h.err != nil {
		h.t.Fatalf("%s: %v", h.name, h.err)
	}
	return 0
}

// commandGone reports whether the command's process no longer exists.
func (h *recipeHolder) commandGone() bool {
	return errors.Is(syscall.Kill(h.pid, 0), syscall.ESRCH)
}

func waitLong(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		<-time.After(20 * time.Millisecond)
	}
}

// pausedHolderIsFenced is the fault every recipe must survive: the holder
// old is frozen past its TTL while next waits; next is granted with a
// greater token and writes; then old's command resumes first and its write
// with its old token is refused by the fence; then old's leasehold process
// resumes, finds the lease lost, stops the command and exits non-zero.
func pausedHolderIsFenced(t *testing.T, old, next *recipeHolder, beforeGrant func()) {
	t.Helper()
	old.pause()
	if beforeGrant != nil {
		beforeGrant()
	}
	next.started()
	if next.token <= old.token {
		t.Fatalf("%s's token %d is not greater than the paused %s's %d", next.name, next.token, old.name, old.token)
	}
	if code, out := next.write(); code != 0 {
		t.Fatalf("%s's write with token %d: exit %d: %s", next.name, next.token, code, out)
	}
	old.cont(old.pid)
	code, out := old.write()
	if code == 0 || !strings.Contains(out, "stale-token") {
		t.Fatalf("the paused %s's write with its old token %d: exit %d: %s; want stale-token", old.name, old.token, code, out)
	}
	old.cont(old.cmd.Process.Pid)
	if code := old.exit(30 * time.Second); code == 0 {
		t.Errorf("the paused %s exited 0 after its lease was lost; stderr: %s", old.name, old.stderr.String())
	}
	if !strings.Contains(old.stderr.String(), "lost") {
		t.Errorf("the paused %s's stderr does not say the lease was lost: %s", old.name, old.stderr.String())
	}
	if !old.commandGone() {
		t.Errorf("the paused %s's command (pid %d) still runs after the lease was lost", old.name, old.pid)
	}
}

// TestRWLockPausedReaderFenced: two readers hold a read lock (`run
// --shared`), a writer queues; one reader is frozen past its TTL and the
// other finishes. The writer is granted with a token greater than both
// readers', writes, and the frozen reader's write with its old token is
// refused.
func TestRWLockPausedReaderFenced(t *testing.T) {
	t.Parallel()
	eps := endpoints(startCluster(t, 1))
	r1 := startHolder(t, "reader-1", eps, "cfg/data", false, "run", "cfg", "--shared", "--ttl", "4s").started()
	r2 := startHolder(t, "reader-2", eps, "cfg/data", false, "run", "cfg", "--shared", "--ttl", "10s").started()
	w := startHolder(t, "writer", eps, "cfg/data", false, "run", "cfg", "--ttl", "10s")
	pausedHolderIsFenced(t, r1, w, func() {
		if w.isStarted() {
			t.Fatal("the writer was granted while two readers held the lock")
		}
		r2.touch("exit")
		if code := r2.exit(30 * time.Second); code != 0 {
			t.Fatalf("reader-2 exited %d; stderr: %s", code, r2.stderr.String())
		}
	})
	if w.token <= r2.token {
		t.Fatalf("writer's token %d is not greater than reader-2's %d", w.token, r2.token)
	}
	w.touch("exit")
	if code := w.exit(30 * time.Second); code != 0 {
		t.Errorf("writer exited %d; stderr: %s", code, w.stderr.String())
	}
}

// TestSemaphorePausedPermitFenced: two holders take both permits of a
// semaphore (`run --permits 2`), a third queues; one holder is frozen past
// its TTL. Its slot goes to the third with a greater token, which writes to
// the slot's key; the frozen holder's write to its slot key with its old
// token is refused, while the other holder's slot is untouched.
func TestSemaphorePausedPermitFenced(t *testing.T) {
	t.Parallel()
	eps := endpoints(startCluster(t, 1))
	a := startHolder(t, "permit-a", eps, "pool", true, "run", "pool", "--permits", "2", "--ttl", "4s").started()
	b := startHolder(t, "permit-b", eps, "pool", true, "run", "pool", "--permits", "2", "--ttl", "10s").started()
	if a.slot == b.slot {
		t.Fatalf("both holders in slot %d", a.slot)
	}
	c := startHolder(t, "permit-c", eps, "pool", true, "run", "pool", "--permits", "2", "--ttl", "10s")
	pausedHolderIsFenced(t, a, c, func() {
		if c.isStarted() {
			t.Fatal("a third holder was granted while both permits were held")
		}
	})
	if c.slot != a.slot {
		t.Fatalf("the third holder got slot %d, want the paused holder's %d", c.slot, a.slot)
	}
	if code, out := b.write(); code != 0 {
		t.Fatalf("permit-b's write to its own slot %d with token %d: exit %d: %s", b.slot, b.token, code, out)
	}
	for _, h := range []*recipeHolder{b, c} {
		h.touch("exit")
		if code := h.exit(30 * time.Second); code != 0 {
			t.Errorf("%s exited %d; stderr: %s", h.name, code, h.stderr.String())
		}
	}
}

// TestElectionPausedLeaderFenced: a leader (`elect NAME VALUE -- CMD`) is
// frozen past its TTL while a second candidate campaigns. The candidate
// wins with a greater epoch and writes; the old leader's write with its old
// epoch is refused, and when the old leader's process resumes it stops its
// command.
func TestElectionPausedLeaderFenced(t *testing.T) {
	t.Parallel()
	eps := endpoints(startCluster(t, 1))
	l1 := startHolder(t, "leader-1", eps, "leader/data", false, "elect", "leader", "v1", "--ttl", "4s").started()
	l2 := startHolder(t, "leader-2", eps, "leader/data", false, "elect", "leader", "v2", "--ttl", "10s")
	pausedHolderIsFenced(t, l1, l2, func() {
		if l2.isStarted() {
			t.Fatal("a second leader was elected while the first led")
		}
	})
	var st struct {
		Holder struct {
			Token uint64 `json:"token"`
			Value string `json:"value"`
		} `json:"holder"`
	}
	cli(t, &st, "status", "leader", "--endpoints", eps)
	if st.Holder.Value != "v2" || st.Holder.Token != l2.token {
		t.Errorf("the leader is %q epoch %d, want v2 epoch %d", st.Holder.Value, st.Holder.Token, l2.token)
	}
	l2.touch("exit")
	if code := l2.exit(30 * time.Second); code != 0 {
		t.Errorf("leader-2 exited %d; stderr: %s", code, l2.stderr.String())
	}
}
