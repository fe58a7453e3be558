package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCLISeedScenario plays DESIGN.md's seed scenario through the CLI
// against `leasehold serve`: a short lease expires, the next holder gets a
// larger token, fenced writes are accepted and refused, the stale release
// is refused.
func TestCLISeedScenario(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	const name, key = "report:417:rebuild", "report:417"

	a := ok[holdingOut](t, srv.cli(t, "acquire", name, "--ttl", "1s", "--owner", "worker-A", "-o", "json"))
	if a.Name != name || a.Token == 0 || len(a.LeaseID) == 0 || a.TTLMs != 1000 || a.Owner != "worker-A" {
		t.Fatalf("acquire by worker-A = %+v", a)
	}
	// Unless the 1 s lease is already gone (a slow machine), status shows it.
	if st := srv.status(t, name); st.Held && (st.Holder == nil || st.Holder.LeaseID != a.LeaseID || st.Holder.Token != a.Token || st.Holder.Owner != "worker-A") {
		t.Fatalf("status after acquire = %+v", st)
	}
	// The acquire command does not keep its lease alive: it expires.
	eventually(t, 10*time.Second, "worker-A's lease to expire", func() bool {
		return !srv.status(t, name).Held
	})

	b := ok[holdingOut](t, srv.cli(t, "acquire", name, "--ttl", "10s", "--owner", "worker-B", "-o", "json"))
	if b.Token <= a.Token || b.LeaseID == a.LeaseID {
		t.Fatalf("worker-B got token %d lease %s; want a token > %d and another lease", b.Token, b.LeaseID, a.Token)
	}
	put := ok[kvPutOut](t, srv.cli(t, "kv", "put", key, "v2", "--token", fmt.Sprint(b.Token), "-o", "json"))
	if put != (kvPutOut{Key: key, Token: b.Token, Status: "accepted"}) {
		t.Errorf("kv put v2 = %+v", put)
	}
	e := fails(t, srv.cli(t, "kv", "put", key, "v1", "--token", fmt.Sprint(a.Token), "-o", "json"), "stale-token", 4)
	if e.Error.LastToken != b.Token {
		t.Errorf("stale-token last_token = %d, want %d", e.Error.LastToken, b.Token)
	}
	fails(t, srv.cli(t, "release", name, "--lease", a.LeaseID, "--token", fmt.Sprint(a.Token), "-o", "json"), "not-holder", 3)

	st := srv.status(t, name)
	if st.Holder == nil || st.Holder.LeaseID != b.LeaseID || st.Holder.Token != b.Token || st.Holder.Owner != "worker-B" {
		t.Errorf("after the stale release the holder is %+v, want worker-B", st.Holder)
	}
	got := ok[kvGetOut](t, srv.cli(t, "kv", "get", key, "-o", "json"))
	if got != (kvGetOut{Key: key, Value: "v2", Token: b.Token}) {
		t.Errorf("kv get = %+v, want v2 with token %d", got, b.Token)
	}
	// Text output, as a person reads it.
	if r := srv.cli(t, "kv", "get", key); r.code != 0 || !strings.Contains(r.stdout, "v2") {
		t.Errorf("kv get (text): %v", r)
	}
	rel := ok[releaseOut](t, srv.cli(t, "release", name, "--lease", b.LeaseID, "--token", fmt.Sprint(b.Token), "-o", "json"))
	if rel != (releaseOut{Name: name, Released: true}) {
		t.Errorf("release by worker-B = %+v", rel)
	}
}

// TestCLIRunExclusion starts several `leasehold run` on one name at once:
// their commands run one at a time, in token order, and each run exits
// with its command's status.
func TestCLIRunExclusion(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	out := filepath.Join(t.TempDir(), "intervals")
	const script = `echo "start $LEASEHOLD_TOKEN $LEASEHOLD_NAME $LEASEHOLD_LEASE_ID" >> "$OUT"; sleep 0.3; echo "end $LEASEHOLD_TOKEN" >> "$OUT"; exit 3`
	const n = 3
	var dones []<-chan error
	for i := range n {
		cmd := exec.Command(leaseholdBin, "run", "job", "--ttl", "5s", "--owner", fmt.Sprintf("runner-%d", i), "--endpoints", srv.Addr, "--", "sh", "-c", script)
		cmd.Env = binEnv("OUT=" + out)
		dones = append(dones, startGroup(t, cmd))
	}
	for i, done := range dones {
		if code := exitStatus(t, done, 30*time.Second, fmt.Sprintf("run %d", i)); code != 3 {
			t.Errorf("run %d exited %d, want its command's 3", i, code)
		}
	}

	lines := strings.Split(strings.TrimSpace(readFile(t, out)), "\n")
	if len(lines) != 2*n {
		t.Fatalf("intervals file has %d lines, want %d:\n%s", len(lines), 2*n, strings.Join(lines, "\n"))
	}
	var last uint64
	leases := map[string]bool{}
	for i := 0; i < len(lines); i += 2 {
		start, end := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		// Exclusion: every start is followed by its own end before any
		// other start.
		if len(start) != 4 || start[0] != "start" || len(end) != 2 || end[0] != "end" || end[1] != start[1] {
			t.Fatalf("intervals overlap or are malformed at line %d:\n%s", i+1, strings.Join(lines, "\n"))
		}
		tok, err := strconv.ParseUint(start[1], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if tok <= last {
			t.Errorf("token %d after %d: want increasing tokens", tok, last)
		}
		last = tok
		if start[2] != "job" || len(start[3]) == 0 || leases[start[3]] {
			t.Errorf("LEASEHOLD_NAME %q, LEASEHOLD_LEASE_ID %q (each run its own lease)", start[2], start[3])
		}
		leases[start[3]] = true
	}
	// Each run released the lock when its command ended.
	if st := srv.status(t, "job"); st.Held || len(st.Waiters) != 0 {
		t.Errorf("after every run ended: %+v, want free with no waiters", st)
	}
}

// TestCLIRunBusy: `run --wait 0` on a held name fails with locked and
// never starts the command; a bounded wait ends with deadline-exceeded.
func TestCLIRunBusy(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	ok[holdingOut](t, srv.cli(t, "acquire", "busy", "--ttl", "30s", "-o", "json"))
	marker := filepath.Join(t.TempDir(), "ran")
	script := "echo ran > " + marker
	fails(t, srv.cli(t, "run", "busy", "--wait", "0", "-o", "json", "--", "sh", "-c", script), "locked", 7)
	fails(t, srv.cli(t, "run", "busy", "--wait", "300ms", "-o", "json", "--", "sh", "-c", script), "deadline-exceeded", 8)
	if readFile(t, marker) != "" {
		t.Error("run started its command without the lock")
	}
	if st := srv.status(t, "busy"); len(st.Waiters) != 0 {
		t.Errorf("waiters left behind: %+v", st.Waiters)
	}
}

// TestCLIRunIfFree: `run --if-free` on a held name exits 0 at once and
// never starts its command (a cron job that must not overlap itself); on
// a free name it runs the command under the lock.
func TestCLIRunIfFree(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	ok[holdingOut](t, srv.cli(t, "acquire", "cron:nightly", "--ttl", "30s", "--owner", "earlier-run", "-o", "json"))
	marker := filepath.Join(t.TempDir(), "ran")
	script := "echo ran $LEASEHOLD_TOKEN > " + marker
	r := srv.cli(t, "run", "cron:nightly", "--if-free", "--", "sh", "-c", script)
	if r.code != 0 || readFile(t, marker) != "" {
		t.Fatalf("run --if-free on a held name: %v, marker %q; want exit 0 and the command not started", r, readFile(t, marker))
	}
	if !strings.Contains(r.stderr, "earlier-run") || !strings.Contains(r.stderr, "not started") {
		t.Errorf("run --if-free stderr %q; want it to say who holds the name and that it did not start", r.stderr)
	}
	if st := srv.status(t, "cron:nightly"); len(st.Waiters) != 0 {
		t.Errorf("waiters left behind: %+v", st.Waiters)
	}
	if r := srv.cli(t, "run", "cron:free", "--if-free", "--", "sh", "-c", script); r.code != 0 || !strings.HasPrefix(readFile(t, marker), "ran ") {
		t.Fatalf("run --if-free on a free name: %v, marker %q; want the command run", r, readFile(t, marker))
	}
	fails(t, srv.cli(t, "run", "cron:free", "--if-free", "--wait", "1s", "-o", "json", "--", "true"), "invalid-argument", 2)
}

// TestCLIRunSaysItWaits: a run that queues behind a holder says so on
// stderr with -v, naming the holder, before it is granted.
func TestCLIRunSaysItWaits(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	ok[holdingOut](t, srv.cli(t, "acquire", "queue:me", "--ttl", "1s", "--owner", "first", "-o", "json"))
	r := srv.cli(t, "run", "queue:me", "-v", "--", "true")
	if r.code != 0 {
		t.Fatalf("run -v: %v", r)
	}
	if !strings.Contains(r.stderr, `waiting for queue:me: held by "first"`) || !strings.Contains(r.stderr, "position 1") {
		t.Errorf("run -v stderr %q; want it to say it waits for the holder", r.stderr)
	}
}

// TestCLIRunLeaseLost freezes `leasehold run` (SIGSTOP) past its TTL; when
// it resumes it finds the lease lost and, the safe deadline being past,
// kills its command at once, and exits with lease-expired's status (5),
// not the command's, so a wrapper can tell a lost lock from a failure.
func TestCLIRunLeaseLost(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	marker := filepath.Join(t.TempDir(), "marker")
	// The loop is bounded so the command cannot outlive the test for long
	// even if nothing kills it.
	const script = `trap 'echo term >> "$MARKER"; exit 7' TERM
echo "started $LEASEHOLD_TOKEN" >> "$MARKER"
i=0; while [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done
exit 0`
	cmd := exec.Command(leaseholdBin, "run", "lost", "--ttl", "1s", "--endpoints", srv.Addr, "--", "sh", "-c", script)
	cmd.Env = binEnv("MARKER=" + marker)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	done := startGroup(t, cmd)
	eventually(t, 30*time.Second, "the command to start", func() bool {
		return strings.HasPrefix(readFile(t, marker), "started ")
	})
	tok, err := strconv.ParseUint(strings.Fields(readFile(t, marker))[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}

	// Freeze leasehold run only; its command keeps running.
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the frozen run's lease to expire", func() bool {
		return !srv.status(t, "lost").Held
	})
	next := ok[holdingOut](t, srv.cli(t, "acquire", "lost", "--ttl", "30s", "-o", "json"))
	if next.Token <= tok {
		t.Errorf("next holder's token %d, want > %d", next.Token, tok)
	}
	if got := readFile(t, marker); strings.Contains(got, "term") {
		t.Fatalf("command got SIGTERM while run was frozen: %q", got)
	}
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	if code := exitStatus(t, done, 15*time.Second, "leasehold run"); code != 5 {
		t.Errorf("run exited %d, want 5 (lease-expired)\nstderr: %s", code, stderr.String())
	}
	checkNoRace(t, "leasehold run", stderr.String())
	if !strings.Contains(stderr.String(), "lease lost") {
		t.Errorf("run's stderr does not say the lease was lost: %q", stderr.String())
	}
	// The release on exit is stale and must not have freed the new holding.
	if st := srv.status(t, "lost"); st.Holder == nil || st.Holder.Token != next.Token {
		t.Errorf("after run ended the holder is %+v, want token %d", st.Holder, next.Token)
	}
}

// TestCLIServerKill9 kills the server with SIGKILL and restarts it on the
// same data dir: the holding, the KV value and the token order survive.
func TestCLIServerKill9(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServe(t, dir)
	a := ok[holdingOut](t, srv.cli(t, "acquire", "durable", "--ttl", "30s", "--owner", "worker-A", "-o", "json"))
	ok[kvPutOut](t, srv.cli(t, "kv", "put", "durable-key", "v1", "--token", fmt.Sprint(a.Token), "-o", "json"))

	srv.Kill(t)
	srv = startServeAt(t, dir, srv.Addr)

	st := srv.status(t, "durable")
	if st.Holder == nil || st.Holder.LeaseID != a.LeaseID || st.Holder.Token != a.Token || st.Holder.Owner != "worker-A" {
		t.Fatalf("after kill -9 and restart the holder is %+v, want %+v", st.Holder, a)
	}
	got := ok[kvGetOut](t, srv.cli(t, "kv", "get", "durable-key", "-o", "json"))
	if got.Value != "v1" || got.Token != a.Token {
		t.Errorf("kv get after restart = %+v, want v1 with token %d", got, a.Token)
	}
	fails(t, srv.cli(t, "acquire", "durable", "--wait", "0", "-o", "json"), "locked", 7)
	b := ok[holdingOut](t, srv.cli(t, "acquire", "other", "--ttl", "30s", "-o", "json"))
	if b.Token <= a.Token {
		t.Errorf("first token after restart %d, want > %d", b.Token, a.Token)
	}
	ok[releaseOut](t, srv.cli(t, "release", "durable", "--lease", a.LeaseID, "--token", fmt.Sprint(a.Token), "-o", "json"))
	c := ok[holdingOut](t, srv.cli(t, "acquire", "durable", "--ttl", "30s", "-o", "json"))
	if c.Token <= b.Token {
		t.Errorf("token %d after %d: want increasing", c.Token, b.Token)
	}

	// Once more, now with the released and re-acquired state in the log.
	srv.Kill(t)
	srv = startServeAt(t, dir, srv.Addr)
	if st := srv.status(t, "durable"); st.Holder == nil || st.Holder.Token != c.Token {
		t.Errorf("after a second kill -9 the holder is %+v, want token %d", st.Holder, c.Token)
	}
	d := ok[holdingOut](t, srv.cli(t, "acquire", "third", "--ttl", "30s", "-o", "json"))
	if d.Token <= c.Token {
		t.Errorf("token %d after %d: want increasing across restarts", d.Token, c.Token)
	}
}

// TestCLIBadInputs: every bad input is answered with its code and exit
// status, as one JSON object with -o json, and changes nothing.
func TestCLIBadInputs(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	h := ok[holdingOut](t, srv.cli(t, "acquire", "held", "--ttl", "30s", "-o", "json"))
	tok := fmt.Sprint(h.Token)
	zeroLease := strings.Repeat("0", 32)
	for _, tc := range []struct {
		name string
		args []string
		code string
		exit int
	}{
		{"invalid name", []string{"acquire", "bad name!"}, "invalid-argument", 2},
		{"empty name", []string{"acquire", ""}, "invalid-argument", 2},
		{"name too long", []string{"acquire", strings.Repeat("n", 257)}, "invalid-argument", 2},
		{"owner too long", []string{"acquire", "x", "--owner", strings.Repeat("o", 129)}, "invalid-argument", 2},
		{"ttl 0", []string{"acquire", "x", "--ttl", "0s"}, "invalid-argument", 2},
		{"negative ttl", []string{"acquire", "x", "--ttl", "-1s"}, "invalid-argument", 2},
		{"unparsable ttl", []string{"acquire", "x", "--ttl", "soon"}, "invalid-argument", 2},
		{"acquire without a name", []string{"acquire"}, "invalid-argument", 2},
		{"try-acquire of a held name", []string{"acquire", "held", "--wait", "0"}, "locked", 7},
		{"kv put without --token", []string{"kv", "put", "k", "v"}, "invalid-argument", 2},
		{"kv put with a token never issued", []string{"kv", "put", "k", "v", "--token", "999999999"}, "invalid-argument", 2},
		{"kv put of 65 KiB", []string{"kv", "put", "k", strings.Repeat("x", 65<<10), "--token", tok}, "invalid-argument", 2},
		{"kv put with an invalid key", []string{"kv", "put", "k y", "v", "--token", tok}, "invalid-argument", 2},
		{"kv get of a missing key", []string{"kv", "get", "k"}, "not-found", 14},
		{"release of an unknown lease", []string{"release", "held", "--lease", zeroLease, "--token", tok}, "not-holder", 3},
		{"release with a wrong token", []string{"release", "held", "--lease", h.LeaseID, "--token", "999999999"}, "not-holder", 3},
		{"release with a malformed lease", []string{"release", "held", "--lease", "not-a-lease", "--token", tok}, "invalid-argument", 2},
		{"release without --lease", []string{"release", "held", "--token", tok}, "invalid-argument", 2},
		{"run without a command", []string{"run", "x"}, "invalid-argument", 2},
		{"unknown subcommand", []string{"frobnicate"}, "invalid-argument", 2},
		{"unknown flag", []string{"status", "held", "--frob"}, "invalid-argument", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fails(t, srv.cli(t, append(tc.args, "-o", "json")...), tc.code, tc.exit)
			// Text mode: the same exit status and a message on stderr,
			// nothing on stdout.
			r := srv.cli(t, tc.args...)
			if r.code != tc.exit || r.stdout != "" || !strings.Contains(r.stderr, "error") {
				t.Errorf("text mode: want exit %d, empty stdout and an error on stderr; got %v", tc.exit, r)
			}
		})
	}

	if r := srv.cli(t, "status", "held", "-o", "yaml"); r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "invalid-argument") {
		t.Errorf("-o yaml: want exit 2 and invalid-argument on stderr; got %v", r)
	}

	// Nothing changed: the one lock is as it was, no key was written.
	ls := ok[lsOut](t, srv.cli(t, "ls", "-o", "json"))
	if len(ls.Locks) != 1 || ls.Locks[0].Name != "held" || ls.Locks[0].Holder == nil || ls.Locks[0].Holder.Token != h.Token || len(ls.Locks[0].Waiters) != 0 {
		t.Errorf("after the bad inputs: %+v, want only %q held with token %d", ls, "held", h.Token)
	}
	fails(t, srv.cli(t, "kv", "get", "k", "-o", "json"), "not-found", 14)
}

// TestCLIUnreachable: with no server, a client command fails with
// unavailable, as one JSON object.
func TestCLIUnreachable(t *testing.T) {
	t.Parallel()
	start := time.Now()
	fails(t, cli(t, "status", "x", "--endpoints", freeAddr(t), "--timeout", "500ms", "-o", "json"), "unavailable", 12)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %s with --timeout 500ms", d)
	}
}

// TestCLIDemo runs `leasehold demo`: it exits 0 and shows the refusals.
func TestCLIDemo(t *testing.T) {
	t.Parallel()
	r := cli(t, "demo")
	if r.code != 0 {
		t.Fatalf("%v", r)
	}
	for _, want := range []string{"stale-token", "not-holder", "worker-A", "worker-B", "value v1"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "UNEXPECTED") {
		t.Errorf("demo reports an unexpected result:\n%s", r.stdout)
	}
	type row struct {
		Event    string `json:"event"`
		Result   string `json:"result"`
		Expected string `json:"expected"`
		OK       bool   `json:"ok"`
	}
	j := ok[struct {
		Timeline []row `json:"timeline"`
	}](t, cli(t, "demo", "-o", "json"))
	if len(j.Timeline) < 6 {
		t.Fatalf("demo -o json timeline has %d rows: %+v", len(j.Timeline), j.Timeline)
	}
	for _, r := range j.Timeline {
		if !r.OK || r.Result != r.Expected {
			t.Errorf("demo row %+v is not as expected", r)
		}
	}
}

// TestCLIWatchJSON: `watch -o json` prints one JSON event per line.
func TestCLIWatchJSON(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	lines, stderr := watchLines(t, "watch", "w:", "-o", "json", "--endpoints", srv.Addr)
	event := func(line string) eventOut {
		t.Helper()
		return oneJSON[eventOut](t, result{args: []string{"watch"}, stdout: line})
	}

	// The watch may subscribe after the first acquire: repeat (acquire and
	// release a fresh name) until an event line arrives.
	deadline := time.Now().Add(15 * time.Second)
	var first string
	for i := 0; first == ""; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("no event from watch; stderr: %s", stderr.String())
		}
		h := ok[holdingOut](t, srv.cli(t, "acquire", fmt.Sprintf("w:%d", i), "--ttl", "30s", "-o", "json"))
		ok[releaseOut](t, srv.cli(t, "release", h.Name, "--lease", h.LeaseID, "--token", fmt.Sprint(h.Token), "-o", "json"))
		select {
		case first = <-lines:
		case <-time.After(200 * time.Millisecond):
		}
	}
	if ev := event(first); !strings.HasPrefix(ev.Name, "w:") || ev.Type == "" || ev.Index == 0 {
		t.Errorf("first event %+v", ev)
	}

	// A known event: it arrives as its own line with the grant's token.
	ok[holdingOut](t, srv.cli(t, "acquire", "unwatched", "--ttl", "30s", "-o", "json"))
	h := ok[holdingOut](t, srv.cli(t, "acquire", "w:final", "--ttl", "30s", "--owner", "watcher-test", "-o", "json"))
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line, open := <-lines:
			if !open {
				t.Fatalf("watch ended; stderr: %s", stderr.String())
			}
			ev := event(line)
			if !strings.HasPrefix(ev.Name, "w:") {
				t.Fatalf("event outside the prefix: %s", line)
			}
			if ev.Name == "w:final" && ev.Type == "acquired" {
				if ev.Token != h.Token || ev.LeaseID != h.LeaseID || ev.Owner != "watcher-test" {
					t.Errorf("acquired event %+v, want token %d lease %s owner watcher-test", ev, h.Token, h.LeaseID)
				}
				return
			}
		case <-timeout:
			t.Fatal("no acquired event for w:final")
		}
	}
}

// TestCLIDefaultOwnerAndTTLLimit: a lock taken without --owner names who
// took it (user@host:pid), and a TTL above the maximum is refused rather
// than silently lowered.
func TestCLIDefaultOwnerAndTTLLimit(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	a := ok[holdingOut](t, srv.cli(t, "acquire", "owner:default", "-o", "json"))
	at, colon := strings.LastIndexByte(a.Owner, '@'), strings.LastIndexByte(a.Owner, ':')
	if at <= 0 || colon < at+2 {
		t.Fatalf("acquire without --owner: owner %q, want user@host:pid", a.Owner)
	}
	if _, err := strconv.Atoi(a.Owner[colon+1:]); err != nil {
		t.Fatalf("acquire without --owner: owner %q does not end in a pid", a.Owner)
	}
	if st := srv.status(t, "owner:default"); st.Holder == nil || st.Holder.Owner != a.Owner {
		t.Fatalf("status shows holder %+v, want owner %q", st.Holder, a.Owner)
	}
	e := fails(t, srv.cli(t, "acquire", "owner:long", "--ttl", "2h", "-o", "json"), "invalid-argument", 2)
	if !strings.Contains(e.Error.Message, "maximum") {
		t.Errorf("--ttl 2h refused with %q; want it to name the maximum", e.Error.Message)
	}
}
