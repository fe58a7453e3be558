package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestProcCPU: the server CPU meter counts a burst of work to well under
// /proc/PID/stat's 10 ms tick, and agrees with it over a longer one.
func TestProcCPU(t *testing.T) {
	pid := os.Getpid()
	// burn works for d of CPU time, then sleeps: a running thread's run
	// time is brought up to date when it leaves the CPU.
	burn := func(d time.Duration) {
		for end := selfCPU() + d; selfCPU() < end; {
		}
		time.Sleep(20 * time.Millisecond)
	}
	s0, err := schedCPU(pid)
	if err != nil {
		t.Fatalf("schedstat: %v", err)
	}
	st0, err := statCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	burn(3 * time.Millisecond)
	s1, _ := schedCPU(pid)
	if d := s1 - s0; d < 2*time.Millisecond || d > 50*time.Millisecond {
		t.Fatalf("3 ms of work read as %v", d)
	}
	burn(300 * time.Millisecond)
	s2, _ := schedCPU(pid)
	st2, _ := statCPU(pid)
	sched, stat := s2-s0, st2-st0
	if diff := sched - stat; diff < -30*time.Millisecond || diff > 30*time.Millisecond {
		t.Fatalf("over ~300 ms of work: schedstat %v, stat %v", sched, stat)
	}
	if got, _ := procCPU(pid); got < s2 {
		t.Fatalf("procCPU = %v, less than schedstat's %v read before it", got, s2)
	}
}

// TestCommit: the measured build is named by its commit, marked dirty only
// when Go code or modules differ from it: the harness's own output in the
// tree does not count.
func TestCommit(t *testing.T) {
	dir := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := commit(dir); got != "unknown" {
		t.Fatalf("commit of a directory outside git = %q, want unknown", got)
	}
	git("init", "-q")
	write("main.go", "package main\n")
	write("docs/bench/results.md", "old\n")
	git("add", ".")
	git("commit", "-q", "-m", "x")
	clean := regexp.MustCompile(`^[0-9a-f]{7,}$`)
	write("docs/bench/results.md", "new\n")
	if got := commit(dir); !clean.MatchString(got) {
		t.Fatalf("with only the results changed: %q, want the bare commit", got)
	}
	write("main.go", "package main\n\nfunc f() {}\n")
	if got := commit(dir); !strings.HasSuffix(got, "-dirty") || !clean.MatchString(strings.TrimSuffix(got, "-dirty")) {
		t.Fatalf("with Go code changed: %q, want COMMIT-dirty", got)
	}
}
