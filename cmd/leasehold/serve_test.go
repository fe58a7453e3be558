package main

import (
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

func TestFlagsFromEnv(t *testing.T) {
	t.Setenv("LEASEHOLD_DATA", "/from/env")
	t.Setenv("LEASEHOLD_NODE_ID", "n7")
	t.Setenv("LEASEHOLD_LOG_LEVEL", "debug")
	cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
	var data, node, level string
	cmd.Flags().StringVar(&data, "data", "./leasehold-data", "")
	cmd.Flags().StringVar(&node, "node-id", "n1", "")
	cmd.Flags().StringVar(&level, "log-level", "info", "")
	if err := cmd.ParseFlags([]string{"--node-id", "n2"}); err != nil {
		t.Fatal(err)
	}
	if err := flagsFromEnv(cmd); err != nil {
		t.Fatal(err)
	}
	if data != "/from/env" || node != "n2" || level != "debug" {
		t.Fatalf("data %q node %q level %q: want the env for unset flags and the command line over the env", data, node, level)
	}
}

func TestFlagsFromEnvBadValue(t *testing.T) {
	t.Setenv("LEASEHOLD_TTL", "soon")
	cmd := &cobra.Command{Use: "x"}
	cmd.Flags().Duration("ttl", 0, "")
	if err := flagsFromEnv(cmd); err == nil {
		t.Fatal("a malformed LEASEHOLD_TTL was accepted")
	}
}

// TestServeGCHeapFloor: a node lets its heap grow to --gc-heap-floor (64
// MiB by default) before collecting, which shows as a GOGC above the
// process's own while the heap is small; 0 leaves GOGC alone; a value that
// is not a byte count, or above 64 GiB, is refused before the node starts.
func TestServeGCHeapFloor(t *testing.T) {
	t.Parallel()
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	srv := startServeAt(t, t.TempDir(), "")
	if p := servertest.Metric(t, srv.Addr, "go_gc_gogc_percent"); p <= float64(base) {
		t.Fatalf("GOGC of a node with the default floor = %v, want above %d", p, base)
	}
	off := startServeAt(t, t.TempDir(), "", "--gc-heap-floor", "0")
	if p := servertest.Metric(t, off.Addr, "go_gc_gogc_percent"); p != float64(base) {
		t.Fatalf("GOGC with --gc-heap-floor 0 = %v, want %d", p, base)
	}
	for _, v := range []string{"lots", "-1MiB", "65GiB"} {
		e := fails(t, srv.cli(t, "serve", "--data", t.TempDir(), "--listen", freeAddr(t), "--gc-heap-floor", v, "-o", "json"), "invalid-argument", 2)
		if !strings.Contains(e.Error.Message, "--gc-heap-floor") {
			t.Errorf("--gc-heap-floor %s refused with %q; want the flag named", v, e.Error.Message)
		}
	}
}

// TestServeOperatorMistakes: a busy port and a data dir another server
// has open are usage errors (invalid-argument, exit 2) that name the
// conflict and the fix, not internal errors ("a bug, report it").
func TestServeOperatorMistakes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServeAt(t, dir, "")
	e := fails(t, srv.cli(t, "serve", "--data", t.TempDir(), "--listen", srv.Addr, "-o", "json"), "invalid-argument", 2)
	if !strings.Contains(e.Error.Message, "in use by another process") || !strings.Contains(e.Error.Message, "--listen") {
		t.Errorf("serve on a busy port: %q", e.Error.Message)
	}
	e = fails(t, srv.cli(t, "serve", "--data", dir, "--listen", freeAddr(t), "-o", "json"), "invalid-argument", 2)
	if !strings.Contains(e.Error.Message, "in use by another leasehold process") || !strings.Contains(e.Error.Message, dir) {
		t.Errorf("serve on a data dir in use: %q", e.Error.Message)
	}
}

// TestGatewaySettleFlag: `gateway --settle D` refuses fenced writes for D
// after it starts (a previous gateway may have died while forwarding), with
// 503 and Retry-After, and forwards nothing meanwhile.
func TestGatewaySettleFlag(t *testing.T) {
	t.Parallel()
	var forwarded atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { forwarded.Add(1) }))
	defer up.Close()
	listen := freeAddr(t)
	cmd := exec.Command(leaseholdBin, "gateway", "--listen", listen, "--upstream", up.URL, "--data", filepath.Join(t.TempDir(), "gw.db"), "--admin-listen", "", "--settle", "30s")
	cmd.Env = binEnv()
	var log syncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var resp *http.Response
	eventually(t, 20*time.Second, "the gateway to answer", func() bool {
		req, _ := http.NewRequest(http.MethodPost, "http://"+listen+"/w", strings.NewReader("v"))
		req.Header.Set(fence.DefaultKeyHeader, "k")
		req.Header.Set(fence.DefaultTokenHeader, "1")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		r.Body.Close()
		resp = r
		return true
	})
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a write right after start with --settle 30s: %d (Retry-After %q), want 503 with Retry-After\n%s", resp.StatusCode, resp.Header.Get("Retry-After"), log.String())
	}
	if n := forwarded.Load(); n != 0 {
		t.Fatalf("%d requests reached the upstream during the settle time", n)
	}
}
