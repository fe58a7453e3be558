package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCLIElectFailover: two `leasehold elect` candidates with a command;
// kill -9 of the leader's process: its command dies with it, the other
// candidate is elected with a larger epoch once the lease expired, and its
// command starts only after the old one is gone. `elect --observe` prints
// both leaders.
func TestCLIElectFailover(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	dir := t.TempDir()
	// Each command records its pid and epoch, and whether the other
	// candidate's command is still alive when it starts (/proc state, or gone).
	const script = `echo $$ > "$DIR/$ME.pid.tmp" && mv "$DIR/$ME.pid.tmp" "$DIR/$ME.pid"
if [ -f "$DIR/$OTHER.pid" ]; then s=$(cut -d' ' -f3 "/proc/$(cat "$DIR/$OTHER.pid")/stat" 2>/dev/null); echo "${s:-gone}" > "$DIR/$ME.saw"; fi
echo "$LEASEHOLD_TOKEN" > "$DIR/$ME.epoch.tmp" && mv "$DIR/$ME.epoch.tmp" "$DIR/$ME.epoch"
exec sleep 60`
	var observed syncBuffer
	obs := exec.Command(leaseholdBin, "elect", "--observe", "svc", "-o", "json", "--endpoints", srv.Addr)
	obs.Env = binEnv()
	obs.Stdout = &observed
	startGroup(t, obs)

	candidate := func(me, other string) (*exec.Cmd, <-chan error, *syncBuffer) {
		cmd := exec.Command(leaseholdBin, "elect", "svc", me, "--ttl", "2s", "--endpoints", srv.Addr, "--", "sh", "-c", script)
		cmd.Env = binEnv("DIR="+dir, "ME="+me, "OTHER="+other)
		var stderr syncBuffer
		cmd.Stderr = &stderr
		return cmd, startGroup(t, cmd), &stderr
	}
	epoch := func(me string) uint64 {
		n, err := strconv.ParseUint(strings.TrimSpace(readFile(t, filepath.Join(dir, me+".epoch"))), 10, 64)
		if err != nil {
			t.Fatalf("epoch of %s: %v", me, err)
		}
		return n
	}
	a, _, _ := candidate("a", "b")
	eventually(t, 30*time.Second, "a to lead", func() bool { return readFile(t, filepath.Join(dir, "a.epoch")) != "" })
	b, doneB, stderrB := candidate("b", "a")
	eventually(t, 30*time.Second, "b to queue", func() bool { return len(srv.status(t, "svc").Waiters) == 1 })
	if readFile(t, filepath.Join(dir, "b.epoch")) != "" {
		t.Fatal("b leads while a does")
	}

	if err := a.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "b to lead after a's lease expired", func() bool { return readFile(t, filepath.Join(dir, "b.epoch")) != "" })
	if saw := strings.TrimSpace(readFile(t, filepath.Join(dir, "b.saw"))); saw != "gone" && saw != "Z" {
		t.Fatalf("when b's command started, a's command was in state %q, want gone", saw)
	}
	ea, eb := epoch("a"), epoch("b")
	if eb <= ea {
		t.Fatalf("epoch of b %d not above a's %d", eb, ea)
	}
	eventually(t, 30*time.Second, "observe to print both leaders", func() bool {
		var seen []string
		for _, line := range strings.Split(strings.TrimSpace(observed.String()), "\n") {
			var v struct {
				Value string `json:"value"`
				Epoch uint64 `json:"epoch"`
			}
			if json.Unmarshal([]byte(line), &v) == nil {
				seen = append(seen, v.Value+"@"+strconv.FormatUint(v.Epoch, 10))
			}
		}
		return strings.Join(seen, " ") == "a@"+strconv.FormatUint(ea, 10)+" b@"+strconv.FormatUint(eb, 10)
	})

	if err := b.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitStatus(t, doneB, 15*time.Second, "elect b"); code != 128+int(syscall.SIGTERM) {
		t.Errorf("elect b exited %d, want 143\nstderr: %s", code, stderrB.String())
	}
	checkNoRace(t, "leasehold elect", stderrB.String())
	if st := srv.status(t, "svc"); st.Held {
		t.Errorf("after the leader's command ended: %+v, want free", st)
	}
}

// TestCLISemaphoreAndSessions: acquire --permits in sessions made with
// `session create`, status lists every holder, another --permits is
// refused, `session list` and `session close` see and end them.
func TestCLISemaphoreAndSessions(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	var ids []string
	for _, owner := range []string{"w1", "w2"} {
		r := srv.cli(t, "session", "create", "--ttl", "60s", "--owner", owner)
		if r.code != 0 {
			t.Fatalf("session create: %v", r)
		}
		ids = append(ids, strings.TrimSpace(r.stdout))
	}
	type grant struct {
		holdingOut
		Slot uint32 `json:"slot"`
	}
	for i, id := range ids {
		g := ok[grant](t, srv.cli(t, "acquire", "enc", "--permits", "2", "--session", id, "-o", "json"))
		if g.LeaseID != id || g.Slot != uint32(i) {
			t.Fatalf("grant %d: %+v", i, g)
		}
	}
	// --wait-id retries a request of --session: the holding it was granted.
	g := ok[grant](t, srv.cli(t, "acquire", "enc", "--permits", "2", "--session", ids[1], "--wait-id", "77", "-o", "json"))
	if g.LeaseID != ids[1] || g.Slot != 1 {
		t.Fatalf("acquire --wait-id: %+v", g)
	}
	if e := fails(t, srv.cli(t, "acquire", "enc", "--wait-id", "77", "-o", "json"), "invalid-argument", 2); !strings.Contains(e.Error.Message, "--session") {
		t.Fatalf("--wait-id without --session: %q", e.Error.Message)
	}
	e := fails(t, srv.cli(t, "acquire", "enc", "--permits", "3", "-o", "json"), "invalid-argument", 2)
	if !strings.Contains(e.Error.Message, "has 2 permits") {
		t.Fatalf("refusal %q does not name the current permits", e.Error.Message)
	}
	fails(t, srv.cli(t, "acquire", "enc", "--permits", "2", "-o", "json"), "locked", 7)
	st := ok[struct {
		Holders []struct {
			LeaseID string `json:"lease_id"`
			Slot    uint32 `json:"slot"`
		} `json:"holders"`
		Permits uint32 `json:"permits"`
	}](t, srv.cli(t, "status", "enc", "-o", "json"))
	if len(st.Holders) != 2 || st.Permits != 2 || st.Holders[1].LeaseID != ids[1] || st.Holders[1].Slot != 1 {
		t.Fatalf("status: %+v", st)
	}
	list := ok[struct {
		Sessions []struct {
			LeaseID string   `json:"lease_id"`
			Names   []string `json:"names"`
		} `json:"sessions"`
	}](t, srv.cli(t, "session", "list", "-o", "json"))
	found := 0
	for _, s := range list.Sessions {
		if (s.LeaseID == ids[0] || s.LeaseID == ids[1]) && len(s.Names) == 1 && s.Names[0] == "enc" {
			found++
		}
	}
	if found != 2 {
		t.Fatalf("session list: %+v", list)
	}
	ok[map[string]any](t, srv.cli(t, "session", "close", ids[0], "-o", "json"))
	if st := srv.status(t, "enc"); st.Holder == nil || st.Holder.LeaseID != ids[1] {
		t.Fatalf("after closing %s: %+v", ids[0], st)
	}
}

// TestCLILockAndSharedRun: `lock NAME` holds until SIGTERM and then
// releases; two `run --shared` commands hold one name at the same time
// while a writer's `acquire` is refused.
func TestCLILockAndSharedRun(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	var out syncBuffer
	lock := exec.Command(leaseholdBin, "lock", "held", "--ttl", "5s", "-o", "json", "--endpoints", srv.Addr)
	lock.Env = binEnv()
	lock.Stdout = &out
	done := startGroup(t, lock)
	eventually(t, 30*time.Second, "lock to print its grant", func() bool { return strings.Contains(out.String(), `"token"`) })
	if st := srv.status(t, "held"); !st.Held {
		t.Fatalf("lock printed %s but status is %+v", out.String(), st)
	}
	if err := lock.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitStatus(t, done, 10*time.Second, "leasehold lock"); code != 0 {
		t.Fatalf("lock exited %d after SIGTERM", code)
	}
	if st := srv.status(t, "held"); st.Held {
		t.Fatalf("after lock ended: %+v, want free", st)
	}

	dir := t.TempDir()
	for _, me := range []string{"r1", "r2"} {
		cmd := exec.Command(leaseholdBin, "run", "rw", "--shared", "--endpoints", srv.Addr, "--", "sh", "-c", `touch "$DIR/$ME"; exec sleep 60`)
		cmd.Env = binEnv("DIR="+dir, "ME="+me)
		startGroup(t, cmd)
		eventually(t, 30*time.Second, me+" to run", func() bool { return fileExists(filepath.Join(dir, me)) })
	}
	fails(t, srv.cli(t, "acquire", "rw", "-o", "json"), "locked", 7)
	st := ok[struct {
		Holders []struct {
			Mode string `json:"mode"`
		} `json:"holders"`
	}](t, srv.cli(t, "status", "rw", "-o", "json"))
	if len(st.Holders) != 2 || st.Holders[0].Mode != "shared" || st.Holders[1].Mode != "shared" {
		t.Fatalf("status of rw: %+v, want two shared holders", st)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestCLISemaphoreFailover: three `run --permits 2`; kill -9 of a holder
// frees its slot once its lease expired, and the waiting third command
// starts in that slot with a token above both earlier ones, after the
// killed holder's command is gone.
func TestCLISemaphoreFailover(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	dir := t.TempDir()
	const script = `echo $$ > "$DIR/$ME.pid.tmp" && mv "$DIR/$ME.pid.tmp" "$DIR/$ME.pid"
for o in $OTHERS; do if [ -f "$DIR/$o.pid" ]; then s=$(cut -d' ' -f3 "/proc/$(cat "$DIR/$o.pid")/stat" 2>/dev/null); echo "$o:${s:-gone}" >> "$DIR/$ME.saw"; fi; done
echo "$LEASEHOLD_TOKEN" > "$DIR/$ME.token.tmp" && mv "$DIR/$ME.token.tmp" "$DIR/$ME.token"
exec sleep 60`
	start := func(me, others string) *exec.Cmd {
		cmd := exec.Command(leaseholdBin, "run", "sem", "--permits", "2", "--ttl", "2s", "--endpoints", srv.Addr, "--", "sh", "-c", script)
		cmd.Env = binEnv("DIR="+dir, "ME="+me, "OTHERS="+others)
		startGroup(t, cmd)
		return cmd
	}
	token := func(me string) uint64 {
		n, err := strconv.ParseUint(strings.TrimSpace(readFile(t, filepath.Join(dir, me+".token"))), 10, 64)
		if err != nil {
			t.Fatalf("token of %s: %v", me, err)
		}
		return n
	}
	a := start("a", "")
	eventually(t, 30*time.Second, "a to hold a permit", func() bool { return readFile(t, filepath.Join(dir, "a.token")) != "" })
	start("b", "")
	eventually(t, 30*time.Second, "b to hold a permit", func() bool { return readFile(t, filepath.Join(dir, "b.token")) != "" })
	start("c", "a")
	eventually(t, 30*time.Second, "c to queue", func() bool { return len(srv.status(t, "sem").Waiters) == 1 })
	if err := a.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "c to hold a's permit", func() bool { return readFile(t, filepath.Join(dir, "c.token")) != "" })
	if saw := strings.TrimSpace(readFile(t, filepath.Join(dir, "c.saw"))); saw != "a:gone" && saw != "a:Z" {
		t.Fatalf("when c's command started, a's command was %q, want gone", saw)
	}
	if tc := token("c"); tc <= token("a") || tc <= token("b") {
		t.Fatalf("c's token %d not above a's %d and b's %d", tc, token("a"), token("b"))
	}
	st := ok[struct {
		Holders []struct {
			Owner string `json:"owner"`
			Slot  uint32 `json:"slot"`
			Token uint64 `json:"token"`
		} `json:"holders"`
	}](t, srv.cli(t, "status", "sem", "-o", "json"))
	if len(st.Holders) != 2 || st.Holders[0].Token != token("b") || st.Holders[0].Slot != 1 || st.Holders[1].Token != token("c") || st.Holders[1].Slot != 0 {
		t.Fatalf("holders after failover: %+v; want b in slot 1 and c in a's slot 0", st.Holders)
	}
}
