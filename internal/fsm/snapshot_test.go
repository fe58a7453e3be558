package fsm

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// busy builds a state with every kind of entry: holders, a queue, a
// lock-delay with a queue, fenced KV and nodes.
func busy(t testing.TB) *rig { return busyWith(t, DefaultLimits()) }

func busyWith(t testing.TB, limits Limits) *rig {
	t.Helper()
	r := newRig(t, limits)
	r.must(sessions("A", "B", "C", "D")...)
	r.must(
		at(1000, acquire("x", "A", waitID(1))),
		at(1001, acquire("x", "B", delay(200), waitID(2))),
		at(1002, acquire("y", "C", delay(1000))),
		at(1003, acquire("y", "D")),
		acquire("z", "D"),
		release("z", "D", 3), // z is forgotten; its token must not come back
		kvPut("k", "v", 2),
		kvPutStrict("k2", "w", 1),
		registerNode("n1", "127.0.0.1:7420"),
		expire("C"), // y in lock-delay (token 2), D queued
	)
	return r
}

func TestSnapshotRestoreKeepsTokens(t *testing.T) {
	r := busy(t)
	before := r.m.Token()
	restored := &rig{t: t, m: roundTrip(t, r.m), tokens: r.tokens}
	if restored.m.Token() != before {
		t.Fatalf("restored counter %d, want %d", restored.m.Token(), before)
	}
	// Same holder, queue, delay and KV after the restore.
	wantHolder(t, restored, "x", "A", 1)
	wantWaiters(t, restored, "x", "B")
	if li := restored.m.Lock("y"); !li.Delayed || li.DelayToken != 2 || li.DelayMs != 1000 {
		t.Fatalf("lock-delay lost: %+v", li)
	}
	wantWaiters(t, restored, "y", "D")
	wantKV(t, restored, "k", "v", 2)
	if restored.m.NodeAPIAddr("n1") != "127.0.0.1:7420" {
		t.Fatal("node lost")
	}
	// Grants after the restore continue above every token before it, also
	// for the forgotten name z and for the queue of the delayed name y.
	wantHolding(t, restored.must(acquire("z", "A")), "A", before+1)
	wantHolding(t, restored.must(endDelay("y", 2)), "D", before+2)
	wantHolding(t, restored.must(release("x", "A", 1)), "B", before+3)
	// The fence state came along: the old token is stale on k.
	if res := restored.apply(kvPut("k", "late", 1)); res.Err == nil {
		t.Fatal("stale write accepted after restore")
	}
}

func TestSnapshotIsDeterministic(t *testing.T) {
	a, b := busy(t), busy(t)
	sa, sb := a.snapshot(), b.snapshot()
	if !bytes.Equal(sa, sb) || !bytes.Equal(sa, a.snapshot()) {
		t.Fatal("equal states gave different snapshots")
	}
}

func TestRestoreReplacesState(t *testing.T) {
	src := busy(t)
	dst := newRig(t, DefaultLimits())
	dst.must(append(sessions("other"), acquire("w", "other"), kvPut("kk", "vv", 1))...)
	if err := dst.m.Restore(src.snapshot()); err != nil {
		t.Fatal(err)
	}
	if dst.m.Session("other") != nil || dst.m.Lock("w").Holder != nil || dst.m.KV("kk") != nil {
		t.Fatal("old state survived Restore")
	}
	if !bytes.Equal(dst.snapshot(), src.snapshot()) {
		t.Fatal("restored state differs from the source")
	}
}

func TestRestoreRejectsGarbage(t *testing.T) {
	r := busy(t)
	before := r.snapshot()
	for _, data := range [][]byte{{0xff}, {0x0a, 0x05, 0x01}, []byte("not a snapshot at all")} {
		if err := r.m.Restore(data); err == nil {
			t.Fatalf("Restore(%x) accepted", data)
		}
		if !bytes.Equal(before, r.snapshot()) {
			t.Fatalf("failed Restore(%x) changed the state", data)
		}
	}
}

// TestRestoreRejectsInconsistent feeds snapshots no sequence of Applies can
// produce. Accepting them would break an invariant at once or later: a
// session listed twice in one queue stays queued after its session ends and
// the next grant from that queue dereferences the dead session (panic); a
// counter below a held token reissues that token.
func TestRestoreRejectsInconsistent(t *testing.T) {
	sessA := &fsmpb.Session{LeaseId: "A", Owner: "worker-A"}
	sessB := &fsmpb.Session{LeaseId: "B", Owner: "worker-B"}
	held := func(lease string, token uint64) *fsmpb.Holding { return &fsmpb.Holding{LeaseId: lease, Token: token} }
	waiter := func(lease string) *fsmpb.Waiter { return &fsmpb.Waiter{LeaseId: lease} }
	tests := []struct {
		name string
		snap *fsmpb.Snapshot
	}{
		{"holder is not a session", &fsmpb.Snapshot{Token: 1, Locks: []*fsmpb.Lock{{Name: "x", Holder: held("C", 1)}}}},
		{"waiter is not a session", &fsmpb.Snapshot{Token: 1, Sessions: []*fsmpb.Session{sessA}, Locks: []*fsmpb.Lock{{Name: "x", Holder: held("A", 1), Waiters: []*fsmpb.Waiter{waiter("C")}}}}},
		{"holder also queued", &fsmpb.Snapshot{Token: 1, Sessions: []*fsmpb.Session{sessA}, Locks: []*fsmpb.Lock{{Name: "x", Holder: held("A", 1), Waiters: []*fsmpb.Waiter{waiter("A")}}}}},
		{"queued twice", &fsmpb.Snapshot{Token: 1, Sessions: []*fsmpb.Session{sessA, sessB}, Locks: []*fsmpb.Lock{{Name: "x", Holder: held("A", 1), Waiters: []*fsmpb.Waiter{waiter("B"), waiter("B")}}}}},
		{"lock listed twice", &fsmpb.Snapshot{Token: 2, Sessions: []*fsmpb.Session{sessA, sessB}, Locks: []*fsmpb.Lock{{Name: "x", Holder: held("A", 1)}, {Name: "x", Holder: held("B", 2)}}}},
		{"holding token above the counter", &fsmpb.Snapshot{Token: 1, Sessions: []*fsmpb.Session{sessA}, Locks: []*fsmpb.Lock{{Name: "x", Holder: held("A", 5)}}}},
		{"holding token 0", &fsmpb.Snapshot{Token: 1, Sessions: []*fsmpb.Session{sessA}, Locks: []*fsmpb.Lock{{Name: "x", Holder: held("A", 0)}}}},
		{"holding token used twice", &fsmpb.Snapshot{Token: 2, Sessions: []*fsmpb.Session{sessA}, Locks: []*fsmpb.Lock{{Name: "x", Holder: held("A", 2)}, {Name: "y", Holder: held("A", 2)}}}},
		{"delay token above the counter", &fsmpb.Snapshot{Token: 1, Locks: []*fsmpb.Lock{{Name: "x", DelayToken: 9, DelayMs: 10}}}},
		{"delay token of a live holding", &fsmpb.Snapshot{Token: 2, Sessions: []*fsmpb.Session{sessA}, Locks: []*fsmpb.Lock{{Name: "x", Holder: held("A", 2)}, {Name: "y", DelayToken: 2}}}},
		{"held and delayed", &fsmpb.Snapshot{Token: 2, Sessions: []*fsmpb.Session{sessA}, Locks: []*fsmpb.Lock{{Name: "x", Holder: held("A", 2), DelayToken: 1}}}},
		{"free with a queue", &fsmpb.Snapshot{Token: 1, Sessions: []*fsmpb.Session{sessA}, Locks: []*fsmpb.Lock{{Name: "x", Waiters: []*fsmpb.Waiter{waiter("A")}}}}},
		{"empty lock", &fsmpb.Snapshot{Token: 1, Locks: []*fsmpb.Lock{{Name: "x"}}}},
		{"kv token above the counter", &fsmpb.Snapshot{Token: 1, Kv: []*fsmpb.KV{{Key: "k", Token: 2}}}},
		{"kv token 0", &fsmpb.Snapshot{Token: 1, Kv: []*fsmpb.KV{{Key: "k"}}}},
	}
	for _, tc := range tests {
		for enc, data := range encodings(t, tc.snap) {
			t.Run(tc.name+"/"+enc, func(t *testing.T) {
				r := busy(t)
				before := r.snapshot()
				if err := r.m.Restore(data); err == nil {
					t.Fatalf("Restore accepted an inconsistent snapshot; consistent() says: %v", consistent(r.m))
				} else if !strings.HasPrefix(err.Error(), "fsm: ") {
					t.Fatalf("error %q lacks the package prefix", err)
				}
				if !bytes.Equal(before, r.snapshot()) {
					t.Fatal("failed Restore changed the state")
				}
			})
		}
	}
}

// TestRestoreAcceptsEdgeCases: snapshots that look odd but that Apply can
// produce must restore.
func TestRestoreAcceptsEdgeCases(t *testing.T) {
	for name, snap := range map[string]*fsmpb.Snapshot{
		"empty":                   {},
		"counter only":            {Token: 1 << 40},
		"counter at the top":      {Token: 1<<64 - 1},
		"session with no locks":   {Sessions: []*fsmpb.Session{{LeaseId: "A"}}},
		"delayed, no queue":       {Token: 3, Locks: []*fsmpb.Lock{{Name: "x", DelayToken: 3, DelayMs: 5}}},
		"kv at the newest token":  {Token: 3, Kv: []*fsmpb.KV{{Key: "k", Value: []byte("v"), Token: 3}}},
		"empty lease id and name": {Token: 1, Sessions: []*fsmpb.Session{{}}, Locks: []*fsmpb.Lock{{Holder: &fsmpb.Holding{Token: 1}}}},
	} {
		for enc, data := range encodings(t, snap) {
			t.Run(name+"/"+enc, func(t *testing.T) {
				m := New(DefaultLimits())
				if err := m.Restore(data); err != nil {
					t.Fatal(err)
				}
				if err := consistent(m); err != nil {
					t.Fatal(err)
				}
				roundTrip(t, m)
			})
		}
	}
}

// encodings returns snap in both formats Restore reads: the snapshot
// stream (records in the order given, unsorted) and the single message of
// the format before streams.
func encodings(t *testing.T, snap *fsmpb.Snapshot) map[string][]byte {
	t.Helper()
	legacy, err := proto.MarshalOptions{Deterministic: true}.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	v := &View{header: &fsmpb.SnapshotHeader{Token: snap.GetToken()}, sessions: snap.GetSessions(), locks: snap.GetLocks(), kv: snap.GetKv(), nodes: snap.GetNodes()}
	var stream bytes.Buffer
	if _, err := v.write(&stream); err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{"stream": stream.Bytes(), "legacy": legacy}
}
