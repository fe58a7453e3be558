package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
)

// TestCLIKVFloodBoundedByQuota floods a real server started with
// --quota-bytes 16MiB with 64 KiB fenced writes to new keys, four times the
// quota: the flood ends in resource-exhausted with the operator's message,
// deletes still work, and the server process's peak resident memory stays
// bounded.
func TestCLIKVFloodBoundedByQuota(t *testing.T) {
	t.Parallel()
	srv := startServeAt(t, t.TempDir(), "", "--quota-bytes", "16MiB")
	a := ok[holdingOut](t, srv.cli(t, "acquire", "flood", "--ttl", "60s", "-o", "json"))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	value := bytes.Repeat([]byte("v"), 64<<10)
	var refused error
	written := 0
	for i := range 1024 { // 64 MiB of values
		if err := c.KVPut(ctx, fmt.Sprintf("flood:%04d", i), value, a.Token, false); err != nil {
			refused = err
			break
		}
		written++
	}
	if !errors.Is(refused, client.ErrResourceExhausted) || !strings.Contains(refused.Error(), "state quota of 16 MiB reached: delete KV keys or raise --quota-bytes") {
		t.Fatalf("after %d writes of 64 KiB: %v, want the state quota's resource-exhausted", written, refused)
	}
	if written > 16<<10>>6 {
		t.Fatalf("%d writes of 64 KiB fit in a 16 MiB quota", written)
	}
	ok[kvPutOut](t, srv.cli(t, "kv", "delete", "flood:0000", "--token", fmt.Sprint(a.Token), "-o", "json"))
	if err := c.KVPut(ctx, "flood:again", value, a.Token, false); err != nil {
		t.Fatalf("a write after a delete made room: %v", err)
	}
	// The bound leaves room for the race detector, which multiplies the heap;
	// without a byte quota the same flood grows without limit.
	const bound = 512 << 20
	if peak := peakRSS(t, srv.cmd.Process.Pid); peak > bound {
		t.Fatalf("the server's peak RSS is %d MiB with a 16 MiB state quota; bound %d MiB", peak>>20, bound>>20)
	} else {
		t.Logf("peak RSS %d MiB after %d writes of 64 KiB", peak>>20, written)
	}
}

// peakRSS reads the process's peak resident set size (VmHWM) from /proc.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}
