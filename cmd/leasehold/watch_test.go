package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestCLIWatchFromEvictedIndexIsCompacted: `watch --from-index N` exits with
// the compacted code when the node's history no longer holds index N,
// instead of starting with a silent gap.
func TestCLIWatchFromEvictedIndexIsCompacted(t *testing.T) {
	t.Parallel()
	srv := startServeAt(t, t.TempDir(), "", "--watch-history", "2")
	for i := range 3 {
		h := ok[holdingOut](t, srv.cli(t, "acquire", fmt.Sprintf("c:%d", i), "--ttl", "30s", "-o", "json"))
		ok[releaseOut](t, srv.cli(t, "release", h.Name, "--lease", h.LeaseID, "--token", fmt.Sprint(h.Token), "-o", "json"))
	}
	fails(t, srv.cli(t, "watch", "c:", "--from-index", "1", "-o", "json"), "compacted", 15)
	fails(t, srv.cli(t, "serve", "--watch-history", "0", "-o", "json"), "invalid-argument", 2)
}

// TestCLIWatchResumesAcrossServerKill: a `watch` whose node is killed
// (kill -9) and started again resumes after the last event it printed: the
// next line is the first event after the restart, with no line printed
// twice and none missing.
func TestCLIWatchResumesAcrossServerKill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServe(t, dir)
	h := ok[holdingOut](t, srv.cli(t, "acquire", "w:0", "--ttl", "30s", "-o", "json"))
	ok[releaseOut](t, srv.cli(t, "release", h.Name, "--lease", h.LeaseID, "--token", fmt.Sprint(h.Token), "-o", "json"))

	lines, stderr := watchLines(t, "watch", "w:", "--from-index", "1", "-o", "json", "--endpoints", srv.Addr)
	next := func(what string) eventOut {
		t.Helper()
		select {
		case line, open := <-lines:
			if !open {
				t.Fatalf("%s: watch ended; stderr: %s", what, stderr.String())
			}
			return oneJSON[eventOut](t, result{args: []string{"watch"}, stdout: line})
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: no line; stderr: %s", what, stderr.String())
		}
		return eventOut{}
	}
	for _, want := range []string{"acquired", "released"} {
		if ev := next("replay of w:0"); ev.Name != "w:0" || ev.Type != want {
			t.Fatalf("replayed %+v, want %s w:0", ev, want)
		}
	}

	srv.Kill(t)
	again := startServeAt(t, dir, srv.Addr)
	if again.Addr != srv.Addr {
		t.Fatalf("the node came back on %s, not %s", again.Addr, srv.Addr)
	}
	ok[holdingOut](t, again.cli(t, "acquire", "w:1", "--ttl", "30s", "-o", "json"))
	if ev := next("after the restart"); ev.Name != "w:1" || ev.Type != "acquired" {
		t.Fatalf("after the restart the watch printed %+v, want acquired w:1 (a line printed twice or lost)", ev)
	}
}

// watchLines runs `leasehold ARGS...` in a process group of its own, killed
// when the test ends, and returns its stdout lines (closed when it exits)
// and its stderr.
func watchLines(t *testing.T, args ...string) (<-chan string, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(leaseholdBin, args...)
	cmd.Env = binEnv()
	// An os.Pipe rather than StdoutPipe: cmd.Wait (in startGroup) must not
	// close the read end under the reader.
	stdout, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = w
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	lines := make(chan string, 64)
	stop := make(chan struct{})
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-stop:
				return
			}
		}
	}()
	// Registered before startGroup, so it runs after startGroup's cleanup
	// has killed the command: the reader then sees EOF.
	t.Cleanup(func() {
		close(stop)
		_ = w.Close()
		<-read
		_ = stdout.Close()
	})
	startGroup(t, cmd)
	_ = w.Close()
	return lines, stderr
}
