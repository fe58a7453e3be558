package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCLIErrorMessages: each error prints its code once and one message,
// without the prefixes of the layers it passed through; locked names the
// holder; a dead endpoint is "no server at ADDR" without waiting out the
// retry timeout; https against the plaintext server is not outcome-unknown.
func TestCLIErrorMessages(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	a := ok[holdingOut](t, srv.cli(t, "acquire", "msg", "--owner", "worker-A", "-o", "json"))
	b := ok[holdingOut](t, srv.cli(t, "acquire", "msg2", "-o", "json"))
	if r := srv.cli(t, "kv", "put", "k", "v", "--token", fmt.Sprint(b.Token)); r.code != 0 {
		t.Fatal(r)
	}
	d := ok[holdingOut](t, srv.cli(t, "acquire", "delayed", "--ttl", "1s", "--lock-delay", "1m", "-o", "json"))
	eventually(t, 10*time.Second, "the 1 s lease to expire", func() bool { return !srv.status(t, "delayed").Held })
	for _, tc := range []struct {
		args []string
		exit int
		want string
	}{
		{[]string{"kv", "put", "k", "v", "--token", fmt.Sprint(a.Token)}, 4,
			fmt.Sprintf(`error: stale-token: kv put: stale token %d for key "k": the resource accepts only tokens >= %d`, a.Token, b.Token)},
		{[]string{"acquire", "msg"}, 7,
			fmt.Sprintf(`error: locked: try acquire msg: "msg" is held by "worker-A" (token %d); --wait D queues for it`, a.Token)},
		{[]string{"acquire", "delayed"}, 6,
			fmt.Sprintf(`error: lock-delay: try acquire delayed: "delayed" is in a lock-delay of 1m0s after its holder (token %d) expired`, d.Token)},
		{[]string{"release", "msg", "--lease", b.LeaseID, "--token", fmt.Sprint(b.Token)}, 3,
			"error: not-holder: release: not the current holder"},
	} {
		r := srv.cli(t, tc.args...)
		if r.code != tc.exit || strings.TrimSpace(r.stderr) != tc.want {
			t.Errorf("%v\nwant exit %d and stderr %q", r, tc.exit, tc.want)
		}
	}

	dead := freeAddr(t)
	r := cli(t, "status", "x", "--endpoints", dead, "--timeout", "1m")
	if want := "error: unavailable: status: no server at " + dead; r.code != 12 || strings.TrimSpace(r.stderr) != want {
		t.Errorf("%v\nwant exit 12 and stderr %q", r, want)
	}
	r = cli(t, "status", "x", "--endpoints", "https://"+srv.Addr, "-o", "json")
	if e := fails(t, r, "unavailable", 12); !strings.Contains(e.Error.Message, "plain HTTP") {
		t.Errorf("https against a plaintext server: %q, want it to say the server speaks plain HTTP", e.Error.Message)
	}
}

// TestCLICtrlC: Ctrl-C while waiting in a queue is canceled (exit 16), not
// deadline-exceeded, and the wait is withdrawn.
func TestCLICtrlC(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	ok[holdingOut](t, srv.cli(t, "acquire", "ctrl-c", "--ttl", "1m", "-o", "json"))
	cmd := exec.Command(leaseholdBin, "acquire", "ctrl-c", "--wait", "-1s", "--endpoints", srv.Addr)
	cmd.Env = binEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	done := startGroup(t, cmd)
	eventually(t, 30*time.Second, "the acquire to queue", func() bool {
		return len(srv.status(t, "ctrl-c").Waiters) == 1
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := exitStatus(t, done, 10*time.Second, "acquire after SIGINT"); code != 16 || !strings.HasPrefix(stderr.String(), "error: canceled: ") {
		t.Fatalf("acquire after SIGINT: exit %d, stderr %q; want exit 16, error: canceled", code, stderr.String())
	}
	if w := srv.status(t, "ctrl-c").Waiters; len(w) != 0 {
		t.Fatalf("the cancelled wait is still queued: %v", w)
	}
}
