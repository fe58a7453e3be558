package server_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestSeedScenario is DESIGN.md's seed scenario against a real server,
// through the gRPC API, with the server's clock driven by hand. It asserts
// every result and compares the timeline with testdata/seed.golden.
//
//	t=0     worker-A acquire report:417:rebuild ttl=5000ms   -> lease-1, token 1
//	t=6000  lease-1 expired (A sent no keepalive; A's process still exists)
//	t=6000  worker-B acquire                                  -> lease-2, token 2
//	t=6100  resource.write(token=2, v2)                       -> accepted
//	t=6200  worker-A resumes; resource.write(token=1, v1)     -> stale-token (rejected)
//	t=6200  worker-A release(lease-1, token 1)                -> not-holder; B still holds lease-2
//	contrast: a resource that does not check tokens ends with value v1
func TestSeedScenario(t *testing.T) {
	const (
		name = "report:417:rebuild"
		key  = "report:417"
	)
	c, clk := startManual(t, servertest.Options{})
	cl := c.Client
	var tl bytes.Buffer
	at := func(ms int64, format string, args ...any) {
		fmt.Fprintf(&tl, "t=%-5d %s\n", ms, fmt.Sprintf(format, args...))
	}

	// t=0: worker-A.
	a := newSession(t, cl, 5000, "worker-A")
	if a.GetTtlMs() != 5000 || a.GetOwner() != "worker-A" {
		t.Fatalf("session A: %v", a)
	}
	hA := acquire(t, cl, name, a.GetLeaseId())
	t1 := hA.GetToken()
	if hA.GetLeaseId() != a.GetLeaseId() || hA.GetOwner() != "worker-A" || hA.GetName() != name {
		t.Fatalf("holding A: %v", hA)
	}
	at(0, "worker-A acquire %s ttl=%dms -> lease-1 token %d", name, a.GetTtlMs(), t1)

	// worker-A stops sending keepalives. The lessor may expire lease-1 no
	// earlier than 5000·(1+drift) ms after its last answer.
	drift := c.Config().Lessor.Drift
	earliest := 5000*time.Millisecond + time.Duration(float64(5*time.Second)*drift)
	clk.Advance(earliest)
	if got := status(t, cl, name).GetHolder().GetLeaseId(); got != a.GetLeaseId() {
		t.Fatalf("at %v (the earliest expiry) the holder is %q, want lease-1", earliest, got)
	}
	clk.Advance(6000*time.Millisecond - earliest)
	moved := c.AdvanceUntil("lease-1 to expire", func() bool { return status(t, cl, name).GetHolder() == nil })
	// AdvanceUntil moves the manual clock a tick per poll while the Expire
	// entry commits in real time, so a loaded machine shows a few ticks
	// more; the bound only catches an expiry that is late by design.
	if limit := 20 * c.Config().Lessor.Tick; moved > limit {
		t.Fatalf("lease-1 expired %v after t=6000, want within %v", moved, limit)
	}
	_, err := cl.KeepAlive(ctxT(t), req(&pb.KeepAliveRequest{LeaseId: a.GetLeaseId()}))
	wantCode(t, "KeepAlive of the expired lease-1", err, api.CodeLeaseExpired)
	at(6000, "lease-1 expired (keepalive -> %s)", api.CodeOf(err))

	// t=6000: worker-B.
	b := newSession(t, cl, 5000, "worker-B")
	hB := acquire(t, cl, name, b.GetLeaseId())
	t2 := hB.GetToken()
	if t2 <= t1 {
		t.Fatalf("t2 = %d, not above t1 = %d", t2, t1)
	}
	at(6000, "worker-B acquire %s -> lease-2 token %d", name, t2)

	// t=6100: B writes with its token.
	clk.Advance(100 * time.Millisecond)
	put, err := cl.KvPut(ctxT(t), req(&pb.KvPutRequest{Key: key, Value: []byte("v2"), Token: t2}))
	mustOK(t, "KvPut(t2)", err)
	if put.Msg.GetToken() != t2 || put.Msg.GetKey() != key {
		t.Fatalf("KvPut(t2) = %v", put.Msg)
	}
	at(6100, "worker-B write(token=%d, v2) -> accepted", t2)

	// t=6200: A resumes and writes with its stale token.
	clk.Advance(100 * time.Millisecond)
	_, err = cl.KvPut(ctxT(t), req(&pb.KvPutRequest{Key: key, Value: []byte("v1"), Token: t1}))
	wantCode(t, "KvPut(t1)", err, api.CodeStaleToken)
	if last := api.FromError(err).LastToken; last != t2 {
		t.Fatalf("stale-token carries last token %d, want %d", last, t2)
	}
	at(6200, "worker-A write(token=%d, v1) -> %s (last token %d)", t1, api.CodeOf(err), api.FromError(err).LastToken)

	_, err = cl.Release(ctxT(t), req(&pb.ReleaseRequest{Name: name, LeaseId: a.GetLeaseId(), Token: t1}))
	wantCode(t, "Release(lease-1, t1)", err, api.CodeNotHolder)
	at(6200, "worker-A release(lease-1, token %d) -> %s", t1, api.CodeOf(err))

	info := status(t, cl, name)
	if h := info.GetHolder(); h.GetLeaseId() != b.GetLeaseId() || h.GetToken() != t2 || h.GetOwner() != "worker-B" {
		t.Fatalf("holder after the stale release: %v, want lease-2 (worker-B) with token %d", h, t2)
	}
	at(6200, "status %s -> %s lease-2 token %d", name, info.GetHolder().GetOwner(), info.GetHolder().GetToken())

	got, err := cl.KvGet(ctxT(t), req(&pb.KvGetRequest{Key: key}))
	mustOK(t, "KvGet", err)
	if string(got.Msg.GetValue()) != "v2" || got.Msg.GetToken() != t2 {
		t.Fatalf("KvGet = %q token %d, want v2 token %d", got.Msg.GetValue(), got.Msg.GetToken(), t2)
	}
	at(6200, "kv get %s -> %s token %d", key, got.Msg.GetValue(), got.Msg.GetToken())

	// The contrast: the same two writes to a store that does not check
	// tokens. The paused holder's late write lands last and wins.
	unfenced := map[string]string{}
	unfenced[key] = "v2" // t=6100, worker-B
	unfenced[key] = "v1" // t=6200, worker-A
	if unfenced[key] != "v1" || unfenced[key] == string(got.Msg.GetValue()) {
		t.Fatalf("unfenced store holds %q, fenced %q", unfenced[key], got.Msg.GetValue())
	}
	fmt.Fprintf(&tl, "contrast: unfenced store ends with %s, fenced KV with %s\n", unfenced[key], got.Msg.GetValue())

	// A fresh cluster starts its counter at 0: the seed's literal tokens.
	if t1 != 1 || t2 != 2 {
		t.Fatalf("tokens %d, %d; a fresh cluster grants 1 then 2", t1, t2)
	}
	golden(t, "seed.golden", tl.Bytes())
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("timeline differs from %s (go test -update rewrites it):\n--- got\n%s--- want\n%s", path, got, want)
	}
}
