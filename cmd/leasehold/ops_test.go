package main

import (
	"encoding/json"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestVersion: `leasehold version` and `--version` name the binary's
// version (v0.1.0 for a build without -ldflags), commit and Go version; -o
// json gives the fields.
func TestVersion(t *testing.T) {
	t.Parallel()
	r := cli(t, "--version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "leasehold v0.1.0 (commit ") || !strings.Contains(r.stdout, "commit ") || !strings.Contains(r.stdout, runtime.Version()) {
		t.Fatalf("--version: %v", r)
	}
	if txt := cli(t, "version"); txt.code != 0 || txt.stdout != r.stdout {
		t.Fatalf("version = %q, want what --version prints, %q", txt.stdout, r.stdout)
	}
	v := ok[struct {
		Version   string `json:"version"`
		Commit    string `json:"commit"`
		GoVersion string `json:"go_version"`
	}](t, cli(t, "version", "-o", "json"))
	if v.Version != "v0.1.0" || v.Commit == "" || v.GoVersion != runtime.Version() {
		t.Fatalf("version -o json = %+v", v)
	}
}

// TestServeJSONLogs: with --log-format json every line of serve's log is
// one JSON object with one time and a level; raft's lines come at their own
// level (a normal start logs no WARN), --access-log logs requests, and
// SIGTERM logs the shutdown.
func TestServeJSONLogs(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	log := &syncBuffer{}
	cmd := exec.Command(leaseholdBin, "serve", "--data", t.TempDir(), "--listen", addr, "--log-format", "json", "--access-log")
	cmd.Env = binEnv()
	cmd.Stderr, cmd.Stdout = log, log
	done := startGroup(t, cmd)
	eventually(t, 20*time.Second, "serve ready", func() bool { return healthy(addr) })
	if r := cli(t, "--endpoints", addr, "status", "ops:1"); r.code != 0 {
		t.Fatalf("status: %v", r)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitStatus(t, done, 15*time.Second, "leasehold serve after SIGTERM"); code != 0 {
		t.Fatalf("serve exited %d after SIGTERM:\n%s", code, log.String())
	}
	checkNoRace(t, "leasehold serve", log.String())
	seen := map[string]bool{}
	raftLines := 0
	for line := range strings.Lines(log.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		msg, _ := rec["msg"].(string)
		if rec["time"] == nil || rec["level"] == nil {
			t.Errorf("log line without time or level: %q", line)
		}
		if rec["component"] == "raft" {
			raftLines++
			if strings.Contains(msg, "[") || strings.Contains(msg, "Z ") {
				t.Errorf("raft line embeds its own level or time: %q", line)
			}
		}
		if rec["level"] == "WARN" || rec["level"] == "ERROR" {
			t.Errorf("a normal start and stop logged %s: %q", rec["level"], line)
		}
		seen[msg] = true
		if msg == "request" && strings.HasSuffix(rec["path"].(string), "/Status") && rec["code"] == "ok" {
			seen["access"] = true
		}
	}
	if raftLines == 0 {
		t.Errorf("no raft line reached the log")
	}
	for _, want := range []string{"leasehold serving", "access", "leasehold shutting down", "leasehold stopped"} {
		if !seen[want] {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
}
