package fsm

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestQuotaKVFlood writes new keys until the state quota refuses one: the
// refusal is a *QuotaError with the operator's message, the accounted size
// never passes the quota, and reads, releases, closes and deletes still
// work on the full state (deletes make room again).
func TestQuotaKVFlood(t *testing.T) {
	limits := DefaultLimits()
	limits.MaxStateBytes = 64 << 10
	r := newRig(t, limits)
	r.must(sessions("A", "B")...)
	r.must(acquire("x", "A"), acquire("x", "B")) // A holds x (token 1), B queued
	value := strings.Repeat("v", 1000)
	var refused error
	keys := 0
	for i := range 1000 { // 1000 × ~1 KiB is far above the quota: the loop ends by refusal
		res := r.apply(kvPut(fmt.Sprintf("k%04d", i), value, 1))
		if res.Err != nil {
			refused = res.Err
			break
		}
		keys++
	}
	if refused == nil {
		t.Fatal("1000 KiB of KV values fit in a 64 KiB quota")
	}
	var qe *QuotaError
	if !errors.Is(refused, ErrQuota) || !errors.As(refused, &qe) {
		t.Fatalf("refusal %v is not a QuotaError", refused)
	}
	if want := "state quota of 64 KiB reached: delete KV keys or raise --quota-bytes"; !strings.Contains(refused.Error(), want) {
		t.Fatalf("refusal %q lacks %q", refused, want)
	}
	if r.m.Bytes() > limits.MaxStateBytes || r.m.Bytes()+qe.Need <= limits.MaxStateBytes {
		t.Fatalf("accounted %d bytes, quota %d, refused need %d", r.m.Bytes(), limits.MaxStateBytes, qe.Need)
	}
	if keys < 50 {
		t.Fatalf("only %d keys of ~1 KiB fit in 64 KiB", keys)
	}
	// Fill the rest with empty values (69 bytes each), so that nothing
	// larger fits: growth of any kind is refused now.
	for i := range 1000 {
		if res := r.apply(kvPut(fmt.Sprintf("s%04d", i), "", 1)); res.Err != nil {
			break
		}
	}
	if res := r.apply(create("C", "worker-C")); !errors.Is(res.Err, ErrQuota) {
		t.Fatalf("CreateSession on a full state: %v", res.Err)
	}
	if res := r.apply(acquire("y", "A")); !errors.Is(res.Err, ErrQuota) {
		t.Fatalf("Acquire of a new name on a full state: %v", res.Err)
	}
	if err := r.m.CheckKVPut("new", []byte(value)); !errors.Is(err, ErrQuota) {
		t.Fatalf("CheckKVPut on a full state: %v", err)
	}
	// Reads, an overwrite that does not grow, release (the queue takes
	// over), close and delete still work.
	wantKV(t, r, "k0000", value, 1)
	r.must(kvPut("k0000", "small", 1))
	wantHolding(t, r.must(release("x", "A", 1)), "B", 2)
	r.must(closeSession("A"))
	before := r.m.Bytes()
	r.must(kvDelete("k0001", 2), kvDelete("k0002", 2))
	if r.m.Bytes() >= before {
		t.Fatalf("deletes did not shrink the state: %d → %d bytes", before, r.m.Bytes())
	}
	r.must(kvPut("fits-again", value, 2))
	if r.m.Bytes() > limits.MaxStateBytes {
		t.Fatalf("accounted %d bytes over the quota %d", r.m.Bytes(), limits.MaxStateBytes)
	}
}

// TestQuotaAccounting pins the size of each kind of record; consistent()
// (run after every Apply of every test) pins the running count against a
// recount.
func TestQuotaAccounting(t *testing.T) {
	r := newRig(t, DefaultLimits())
	r.must(create("lease", "own"))
	if got, want := r.m.Bytes(), int64(recordOverhead+5+3); got != want {
		t.Fatalf("session: %d bytes, want %d", got, want)
	}
	r.must(acquire("nm", "lease"))
	if got, want := r.m.Bytes(), int64(3*recordOverhead+5+3+2+2+5); got != want {
		t.Fatalf("session with a holding: %d bytes, want %d", got, want)
	}
	r.must(closeSession("lease"))
	if r.m.Bytes() != 0 {
		t.Fatalf("empty state accounts %d bytes", r.m.Bytes())
	}
	r.must(kvPut("key", "value", 1))
	if got, want := r.m.Bytes(), int64(recordOverhead+3+5); got != want {
		t.Fatalf("KV entry: %d bytes, want %d", got, want)
	}
	r.must(kvDelete("key", 1))
	if got, want := r.m.Bytes(), int64(recordOverhead+3); got != want {
		t.Fatalf("tombstone: %d bytes, want %d", got, want)
	}
}

// TestQuotaNeverBlocksRegisterNode: a full state still learns its members.
func TestQuotaNeverBlocksRegisterNode(t *testing.T) {
	limits := DefaultLimits()
	limits.MaxStateBytes = 1
	r := newRig(t, limits)
	r.must(registerNode("n1", "127.0.0.1:7420"))
	if r.m.NodeAPIAddr("n1") == "" {
		t.Fatal("node not registered")
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{256 << 20: "256 MiB", 64 << 10: "64 KiB", 2 << 30: "2 GiB", 1000: "1000 bytes", 0: "0 bytes"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
