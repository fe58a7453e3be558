//go:build linux

package supervise

import (
	"bytes"
	"context"
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

	"go.uber.org/goleak"
)

// helperEnv makes the test binary act as a supervising process (see runHelper).
const helperEnv = "LEASEHOLD_SUPERVISE_HELPER"

// stallEnv makes the helper stall right after the command started, so that the test kills
// the supervisor at the earliest moment it can.
const stallEnv = "LEASEHOLD_SUPERVISE_STALL"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		if os.Getenv(stallEnv) != "" {
			started = func() { select {} }
		}
		runHelper(dir)
		return
	}
	goleak.VerifyTestMain(m)
}

// runHelper supervises a command that records its pid in dir/pid, under a lease that never
// ends; the test kills this process with SIGKILL.
func runHelper(dir string) {
	lease := newFakeLease(time.Now().Add(time.Hour))
	_, err := Run(context.Background(), lease, Config{
		Argv: []string{"/bin/sh", "-c", `sleep 60 & echo $! > "$0/child"; echo $$ > "$0/pid.tmp" && mv "$0/pid.tmp" "$0/pid"; wait`, dir},
	})
	if err != nil {
		os.Exit(3)
	}
	os.Exit(0)
}

// fakeLease is a Lease whose deadline and loss the test controls.
type fakeLease struct {
	mu       sync.Mutex // protects deadline
	deadline time.Time

	done     chan struct{}
	loseOnce sync.Once
}

func newFakeLease(deadline time.Time) *fakeLease {
	return &fakeLease{deadline: deadline, done: make(chan struct{})}
}

func (l *fakeLease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

func (l *fakeLease) Done() <-chan struct{} { return l.done }

func (l *fakeLease) lose() { l.loseOnce.Do(func() { close(l.done) }) }

// waitFor polls cond every 5 ms until it holds or limit passes.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		<-tick.C
	}
}

// readPids waits for the files dir/name (one pid each, written by the command) and returns
// the pids.
func readPids(t *testing.T, dir string, names ...string) []int {
	t.Helper()
	var pids []int
	for _, n := range names {
		p := filepath.Join(dir, n)
		var b []byte
		waitFor(t, 10*time.Second, "pid file "+n, func() bool {
			var err error
			b, err = os.ReadFile(p)
			return err == nil && bytes.HasSuffix(b, []byte("\n"))
		})
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("pid file %s: %q", n, b)
		}
		pids = append(pids, pid)
		t.Cleanup(func() { // a failed test must not leave its processes behind
			if alive(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		})
	}
	return pids
}

func alive(pid int) bool {
	_, live := procGroup(pid)
	return live
}

type runResult struct {
	res Result
	err error
	at  time.Time // when Run returned
}

func runAsync(ctx context.Context, lease Lease, cfg Config) <-chan runResult {
	out := make(chan runResult, 1)
	go func() {
		res, err := Run(ctx, lease, cfg)
		out <- runResult{res, err, time.Now()}
	}()
	return out
}

func await(t *testing.T, c <-chan runResult) runResult {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20 s")
		return runResult{}
	}
}

// spawner starts two background children, records the pids of all three, and waits.
const spawner = `sleep 30 & echo $! > "$0/a"; sleep 30 & echo $! > "$0/b"; echo $$ > "$0/sh"; wait`

// TestTreeStopped: when the lease is lost, or run is asked to stop, the command's children
// die with it, and Run (after which the caller releases the lock) returns only once no
// process of the group is alive.
func TestTreeStopped(t *testing.T) {
	tests := []struct {
		name string
		stop func(l *fakeLease, sigs chan<- os.Signal)
		lost bool
	}{
		{"lease lost", func(l *fakeLease, _ chan<- os.Signal) { l.lose() }, true},
		{"SIGTERM to run", func(_ *fakeLease, sigs chan<- os.Signal) { sigs <- syscall.SIGTERM }, false},
		{"SIGINT to run", func(_ *fakeLease, sigs chan<- os.Signal) { sigs <- syscall.SIGINT }, false},
		{"SIGHUP to run", func(_ *fakeLease, sigs chan<- os.Signal) { sigs <- syscall.SIGHUP }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			lease := newFakeLease(time.Now().Add(time.Hour))
			sigs := make(chan os.Signal, 1)
			done := runAsync(context.Background(), lease, Config{
				Argv: []string{"/bin/sh", "-c", spawner, dir}, KillAfter: 5 * time.Second, Signals: sigs,
			})
			pids := readPids(t, dir, "a", "b", "sh")
			tt.stop(lease, sigs)
			r := await(t, done)
			for _, pid := range pids {
				if alive(pid) {
					t.Errorf("process %d of the command's tree is alive after Run returned", pid)
				}
			}
			if r.err != nil || r.res.LeaseLost != tt.lost || r.res.ExitCode <= 128 {
				t.Fatalf("Run = %+v, %v; want a signal exit, LeaseLost %v", r.res, r.err, tt.lost)
			}
		})
	}
}

// TestLeftoversStopped: a command that exits leaving a background child behind (holding the
// output pipe open): Run returns the command's status only after the child is gone.
func TestLeftoversStopped(t *testing.T) {
	dir := t.TempDir()
	lease := newFakeLease(time.Now().Add(time.Hour))
	var out syncBuffer
	r := await(t, runAsync(context.Background(), lease, Config{
		Argv:      []string{"/bin/sh", "-c", `sleep 30 & echo $! > "$0/a"; echo bye; exit 3`, dir},
		KillAfter: 5 * time.Second,
		Stdout:    &out,
	}))
	pids := readPids(t, dir, "a")
	if alive(pids[0]) {
		t.Fatalf("background child %d alive after Run returned", pids[0])
	}
	if r.err != nil || r.res.ExitCode != 3 || out.String() != "bye\n" {
		t.Fatalf("Run = %+v, %v, output %q; want exit 3 and bye", r.res, r.err, out.String())
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a concurrent reader.
type syncBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestKilledByDeadline: a command whose whole tree ignores SIGTERM, under a lease that is
// not renewed, gets SIGTERM no earlier than deadline − KillAfter and SIGKILL at the deadline,
// not KillAfter after the lease was reported lost.
func TestKilledByDeadline(t *testing.T) {
	dir := t.TempDir()
	const killAfter = time.Second
	deadline := time.Now().Add(2500 * time.Millisecond)
	lease := newFakeLease(deadline)
	done := runAsync(context.Background(), lease, Config{
		Argv:      []string{"/bin/sh", "-c", `trap "" TERM; ` + spawner, dir},
		KillAfter: killAfter,
	})
	pids := readPids(t, dir, "a", "b", "sh")
	r := await(t, done)
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("process %d alive after Run returned", pid)
		}
	}
	if r.err != nil || r.res.ExitCode != 128+int(syscall.SIGKILL) {
		t.Fatalf("Run = %+v, %v; want exit 137", r.res, r.err)
	}
	if r.res.TermSent.Before(deadline.Add(-killAfter)) {
		t.Fatalf("SIGTERM at %v, before deadline − kill-after %v", r.res.TermSent, deadline.Add(-killAfter))
	}
	// The kill timer fires at the deadline; allow for scheduling delay on a loaded machine.
	// (Without the schedule, SIGKILL came kill-after past a loss noticed at the deadline.)
	if late := r.res.KillSent.Sub(deadline); r.res.KillSent.Before(r.res.TermSent) || late > killAfter/2 {
		t.Fatalf("SIGKILL at deadline%+v (TERM at deadline%+v), want at the deadline", late, r.res.TermSent.Sub(deadline))
	}
}

// TestRenewalPostponesTerm: a deadline that moves later (a confirmed renewal) moves SIGTERM
// with it: the command runs past the first deadline − KillAfter untouched.
func TestRenewalPostponesTerm(t *testing.T) {
	dir := t.TempDir()
	const killAfter = 500 * time.Millisecond
	first := time.Now().Add(1500 * time.Millisecond)
	lease := newFakeLease(first)
	done := runAsync(context.Background(), lease, Config{
		Argv:      []string{"/bin/sh", "-c", `echo $$ > "$0/sh"; while [ ! -e "$0/go" ]; do sleep 0.02; done; exit 5`, dir},
		KillAfter: killAfter,
	})
	lease.mu.Lock()
	lease.deadline = time.Now().Add(time.Hour) // renewed
	lease.mu.Unlock()
	readPids(t, dir, "sh")
	// The condition is time itself: wait until the first SIGTERM time has passed.
	waitFor(t, 10*time.Second, "the first deadline − kill-after to pass", func() bool {
		return time.Now().After(first.Add(-killAfter / 2))
	})
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r := await(t, done)
	if r.err != nil || r.res.ExitCode != 5 || !r.res.TermSent.IsZero() || !r.res.KillSent.IsZero() {
		t.Fatalf("Run = %+v, %v; want exit 5 and no signal", r.res, r.err)
	}
}

// TestSupervisorKilled: kill -9 of the supervising process kills the command and the
// processes it started, also when the supervisor dies the moment the command started.
func TestSupervisorKilled(t *testing.T) {
	t.Run("running", func(t *testing.T) { testSupervisorKilled(t, false) })
	t.Run("just started", func(t *testing.T) { testSupervisorKilled(t, true) })
}

func testSupervisorKilled(t *testing.T, stall bool) {
	dir := t.TempDir()
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"="+dir)
	if stall {
		helper.Env = append(helper.Env, stallEnv+"=1")
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	waitFor(t, 10*time.Second, "the supervised command's pid", func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "pid"))
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	t.Cleanup(func() {
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if !alive(pid) {
		t.Fatalf("command %d not running", pid)
	}
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	waitFor(t, 10*time.Second, "the command to die with its supervisor", func() bool { return !alive(pid) })
	child := readPids(t, dir, "child")[0]
	waitFor(t, 10*time.Second, "the command's child to die with the supervisor", func() bool { return !alive(child) })
}

func TestStartAndShell(t *testing.T) {
	lease := newFakeLease(time.Now().Add(time.Hour))
	_, err := Run(context.Background(), lease, Config{Argv: []string{filepath.Join(t.TempDir(), "no-such-command")}})
	if !errors.Is(err, ErrStart) {
		t.Fatalf("missing command: %v, want ErrStart", err)
	}
	if _, err := Run(context.Background(), lease, Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("no command: %v, want ErrInvalidConfig", err)
	}
	var out bytes.Buffer
	res, err := Run(context.Background(), lease, Config{
		Argv: []string{"echo", "$((40+2))", "&&", "exit", "4"}, Shell: true, Stdout: &out,
		Env: append(os.Environ(), "X=1"),
	})
	if err != nil || res.ExitCode != 4 || out.String() != "42\n" {
		t.Fatalf("shell: %+v, %v, output %q; want exit 4 and 42", res, err, out.String())
	}
}

func TestMaxKillAfter(t *testing.T) {
	tests := []struct{ window, interval, want time.Duration }{
		{9700 * time.Millisecond, 10 * time.Second / 3, 9700*time.Millisecond - 10*time.Second/3 - time.Second},
		{880 * time.Millisecond, time.Second / 3, 880*time.Millisecond - time.Second/3 - time.Second/6},
		{time.Second, time.Second, 0},
	}
	for _, tt := range tests {
		if got := MaxKillAfter(tt.window, tt.interval); got != tt.want {
			t.Errorf("MaxKillAfter(%v, %v) = %v, want %v", tt.window, tt.interval, got, tt.want)
		}
	}
}
