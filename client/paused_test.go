package client_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/client"
)

// The holder process of TestPausedHolderIsFenced is this test binary run
// again with helperEnv=holder. Its protocol, one line each:
//
//	out: holding TOKEN LEASE_ID      after the grant
//	out: done-fired CAUSE            once, when Lock.Done is seen closed (checked every 50 ms)
//	in:  write                       KVPut(key, "late", TOKEN)
//	out: write-result CODE|accepted  its outcome
//
// It ends when stdin closes.
const (
	helperAddrEnv = "LEASEHOLD_CLIENT_TEST_ADDR"
	helperNameEnv = "LEASEHOLD_CLIENT_TEST_NAME"
	helperKeyEnv  = "LEASEHOLD_CLIENT_TEST_KEY"
)

// runHolder is the helper process's body (TestMain runs it instead of the
// tests when helperEnv=holder). It returns the process's exit status.
func runHolder() int {
	addr, name, key := os.Getenv(helperAddrEnv), os.Getenv(helperNameEnv), os.Getenv(helperKeyEnv)
	ctx := context.Background()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1
	}
	defer c.Close()
	s, err := c.NewSession(ctx, client.WithTTL(time.Second), client.WithOwner("paused-holder"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1
	}
	defer s.Orphan()
	l, err := s.Acquire(ctx, name)
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1
	}
	fmt.Printf("holding %d %s\n", l.Token(), l.LeaseID())

	cmds := make(chan string)
	go func() {
		defer close(cmds)
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			cmds <- sc.Text()
		}
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	fired := false
	for {
		select {
		case <-tick.C:
			if !fired && isClosed(l.Done()) {
				fired = true
				fmt.Printf("done-fired %v\n", context.Cause(l.Context()))
			}
		case cmd, ok := <-cmds:
			if !ok {
				return 0
			}
			if cmd == "write" {
				// Deliberately not checking Done first: the worst case,
				// a holder that resumes in the middle of its write.
				res := "accepted"
				if err := c.KVPut(ctx, key, []byte("late"), l.Token(), false); err != nil {
					res = string(api.CodeOf(err))
				}
				fmt.Printf("write-result %s\n", res)
			}
		}
	}
}

// TestPausedHolderIsFenced stops a holder process with SIGSTOP past its
// TTL; another session takes the lock with a larger token and writes; the
// resumed holder's Done has fired and its late write is refused.
func TestPausedHolderIsFenced(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.Addr)
	ctx := testCtx(t)
	const name, key = "report:417:rebuild", "report:417"

	child := exec.Command(os.Args[0])
	child.Env = append(os.Environ(), helperEnv+"=holder", helperAddrEnv+"="+ts.Addr, helperNameEnv+"="+name, helperKeyEnv+"="+key)
	child.Stderr = &logWriter{t: t, prefix: "holder: "}
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	pid := child.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGCONT)
		_ = child.Process.Kill()
		_ = child.Wait()
	})
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// next returns the next line that starts with one of the helper's
	// words (the test framework prints others, such as PASS).
	next := func(what string) string {
		t.Helper()
		timeout := time.After(15 * time.Second)
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("holder exited while waiting for %s", what)
				}
				for _, w := range []string{"holding ", "done-fired", "write-result "} {
					if strings.HasPrefix(line, w) {
						return line
					}
				}
			case <-timeout:
				t.Fatalf("timed out waiting for the holder's %s", what)
			}
		}
	}
	write := func() {
		t.Helper()
		if _, err := io.WriteString(stdin, "write\n"); err != nil {
			t.Fatal(err)
		}
	}

	var t1 uint64
	var lease1 string
	if _, err := fmt.Sscanf(next("grant"), "holding %d %s", &t1, &lease1); err != nil {
		t.Fatal(err)
	}
	write()
	if got := next("first write"); got != "write-result accepted" {
		t.Fatalf("holder's write while holding: %q, want accepted", got)
	}

	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	// The server frees the lock no earlier than the holder's last answered
	// renewal + TTL·(1+drift); poll (bounded) until it has.
	eventually(t, 10*time.Second, "the paused holder's lease to expire", func() bool {
		info, err := c.Status(ctx, name)
		return err == nil && info.GetHolder().GetLeaseId() != lease1
	})
	t.Logf("lock freed %s after SIGSTOP", time.Since(stopped).Round(time.Millisecond))

	s2 := newSession(t, c, client.WithOwner("worker-B"))
	l2, err := s2.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= t1 {
		t.Fatalf("second holder's token %d, want > %d", l2.Token(), t1)
	}
	if err := c.KVPut(ctx, key, []byte("fresh"), l2.Token(), false); err != nil {
		t.Fatalf("write of the new holder: %v", err)
	}

	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	write() // at once: the holder may not have looked at Done yet
	var fired, result string
	for fired == "" || result == "" {
		switch line := next("done-fired and write-result"); {
		case strings.HasPrefix(line, "done-fired"):
			fired = line
		case strings.HasPrefix(line, "write-result "):
			result = strings.TrimPrefix(line, "write-result ")
		}
	}
	if !strings.Contains(fired, client.ErrLeaseLost.Error()) {
		t.Errorf("holder's Done cause: %q, want %q", fired, client.ErrLeaseLost)
	}
	if result != string(api.CodeStaleToken) {
		t.Errorf("resumed holder's late write: %s, want %s", result, api.CodeStaleToken)
	}
	v, tok, err := c.KVGet(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if string(v) != "fresh" || tok != l2.Token() {
		t.Errorf("value %q token %d, want fresh token %d", v, tok, l2.Token())
	}
	if err := c.Release(ctx, name, lease1, t1); api.CodeOf(err) != api.CodeNotHolder {
		t.Errorf("release by the resumed holder: %v, want not-holder", err)
	}

	if err := stdin.Close(); err != nil {
		t.Fatal(err)
	}
	exited := time.After(10 * time.Second)
	for open := true; open; { // until the holder exits
		select {
		case _, open = <-lines:
		case <-exited:
			t.Fatal("holder did not exit after stdin closed")
		}
	}
	if err := child.Wait(); err != nil {
		t.Errorf("holder process: %v", err)
	}
}

// logWriter sends a child's stderr to t.Log, line by line.
type logWriter struct {
	t      testing.TB
	prefix string
}

func (w *logWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Log(w.prefix + line)
	}
	return len(p), nil
}
