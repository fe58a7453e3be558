package fsm

import (
	"bytes"
	"math"
	"slices"
	"sort"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// fuzzLimits are small so that fuzzed commands reach every limit.
// fuzzLimits are small enough that commands hit every limit; the state
// quota leaves busyWith's state room for a few more records only.
var fuzzLimits = Limits{MaxSessions: 6, MaxLocksPerSession: 3, MaxWaitersPerName: 2, MaxKVKeys: 3, MaxStateBytes: 1400}

// FuzzApply applies one arbitrary command to a busy Machine (see busyWith:
// x held by A with B queued, y in lock-delay with D queued, KV k and k2),
// then drives the result: a fresh grant, the end of every lock-delay and
// the close of every session. rig checks after each Apply that the state is
// consistent, tokens only grow and refusals change nothing; the snapshot
// must survive a round trip. Commands without an op are skipped: the server
// never proposes them, and Apply panics on them by design.
func FuzzApply(f *testing.F) {
	for _, cmd := range []*fsmpb.Command{
		create("E", "worker-E"), create("A", "again"),
		closeSession("A"), closeSession("D"), expire("A"), expire("B"), expire("nobody"),
		acquire("x", "B"), acquire("x", "D", try()), acquire("y", "A", delay(5), waitID(3)), acquire("new", "A"),
		cancelWait("x", "B", 2), cancelWait("x", "A", 1), cancelWait("y", "D", 0),
		release("x", "A", 1), release("x", "B", 1), release("y", "C", 2),
		endDelay("y", 2), endDelay("y", 3),
		kvPut("k", "v", 3), kvPut("k", "v", 1), kvPutStrict("k", "v", 2), kvPut("k3", "v", 3), kvPut("k", "v", 4),
		bump(10), bump(math.MaxInt64), bump(math.MaxUint64),
		registerNode("n2", "127.0.0.1:1"),
		kvDelete("k", 2), kvDelete("k", 1), kvDeleteStrict("k", 2), kvDelete("nope", 3),
		floor(50, true), floor(5, false), floor(math.MaxUint64, false),
		acquire("x", "B", shared()), acquire("new", "A", shared()), acquire("new", "A", permits(2)), acquire("x", "D", permits(2)),
		acquire("new", "A", withValue("v")), proclaim("x", "A", 1, "v"), proclaim("x", "B", 1, "v"),
	} {
		b, err := proto.Marshal(cmd)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var cmd fsmpb.Command
		if proto.Unmarshal(data, &cmd) != nil || cmd.GetOp() == nil {
			return
		}
		r := busyWith(t, fuzzLimits)
		r.apply(&cmd)
		roundTrip(t, r.m)
		drive(r)
	})
}

// FuzzRestore restores arbitrary bytes over a busy Machine. On error the
// state must be unchanged; on success it must be consistent, equal to a
// Restore into an empty Machine, survive a round trip, and keep its
// invariants while driven.
func FuzzRestore(f *testing.F) {
	seed := busyWith(f, fuzzLimits)
	f.Add(seed.snapshot())
	f.Add([]byte{})
	for _, s := range []*fsmpb.Snapshot{
		{Token: 1, Locks: []*fsmpb.Lock{{Name: "x", Holder: &fsmpb.Holding{LeaseId: "A", Token: 1}}}},
		{Token: 1, Sessions: []*fsmpb.Session{{LeaseId: "A"}}, Locks: []*fsmpb.Lock{{Name: "x", Holder: &fsmpb.Holding{LeaseId: "A", Token: 1}, Waiters: []*fsmpb.Waiter{{LeaseId: "A"}}}}},
		{Token: 3, Sessions: []*fsmpb.Session{{LeaseId: "A"}, {LeaseId: "B"}}, Locks: []*fsmpb.Lock{{Name: "y", DelayToken: 2, DelayMs: 10, Waiters: []*fsmpb.Waiter{{LeaseId: "B", WaitId: 1}}}}},
		{Token: 1, Kv: []*fsmpb.KV{{Key: "k", Token: 1}, {Key: "k", Token: 1}}, Nodes: []*fsmpb.Node{{Id: "n"}, {Id: "n"}}},
		{Token: 3, Sessions: []*fsmpb.Session{{LeaseId: "A"}, {LeaseId: "B"}, {LeaseId: "C"}}, Locks: []*fsmpb.Lock{{Name: "s", Permits: 2, Holders: []*fsmpb.Holding{{LeaseId: "A", Token: 1}, {LeaseId: "B", Token: 2, Slot: 1}}, Waiters: []*fsmpb.Waiter{{LeaseId: "C"}}}}},
		{Token: 3, Sessions: []*fsmpb.Session{{LeaseId: "A"}, {LeaseId: "B"}, {LeaseId: "C"}}, Locks: []*fsmpb.Lock{{Name: "rw", Holders: []*fsmpb.Holding{{LeaseId: "A", Token: 1, Mode: fsmpb.Mode_MODE_SHARED}, {LeaseId: "B", Token: 2, Mode: fsmpb.Mode_MODE_SHARED}}, Waiters: []*fsmpb.Waiter{{LeaseId: "C"}}}}},
	} {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := busyWith(t, fuzzLimits)
		before := r.snapshot()
		if err := r.m.Restore(data); err != nil {
			if !bytes.Equal(before, r.snapshot()) {
				t.Fatalf("failed Restore (%v) changed the state", err)
			}
			return
		}
		if err := consistent(r.m); err != nil {
			t.Fatalf("Restore accepted an inconsistent state: %v", err)
		}
		fresh := New(fuzzLimits)
		if err := fresh.Restore(data); err != nil {
			t.Fatalf("Restore into an empty Machine failed: %v", err)
		}
		got, err := fresh.Snapshot()
		if err != nil || !bytes.Equal(got, r.snapshot()) {
			t.Fatalf("Restore left traces of the old state (err %v)", err)
		}
		roundTrip(t, r.m)
		// Only a hand-made snapshot has a counter this high (BumpToken is
		// capped at MaxInt64); the grants of drive would exhaust it.
		if r.m.Token() > math.MaxUint64-1<<32 {
			return
		}
		r.tokens = tokenWatch{counter: r.m.Token()}
		drive(r)
	})
}

// drive exercises every hand-over path of r's state: a fresh grant, the end
// of every lock-delay, then the close of every session, in name order.
func drive(r *rig) {
	r.apply(create("probe", "probe"))
	r.apply(acquire("probe-lock", "probe"))
	delays := r.m.LockDelays()
	sort.Slice(delays, func(i, j int) bool { return delays[i].Name < delays[j].Name })
	for _, d := range delays {
		r.apply(endDelay(d.Name, d.Token))
	}
	var ids []string
	for _, s := range r.m.Sessions() {
		ids = append(ids, s.GetLeaseId())
	}
	slices.Sort(ids)
	for _, id := range ids {
		r.apply(closeSession(id))
	}
	if len(r.m.sessions) != 0 {
		r.t.Fatalf("sessions left after closing all: %d", len(r.m.sessions))
	}
	for name, l := range r.m.locks {
		if len(l.holders) != 0 || len(l.waiters) != 0 {
			r.t.Fatalf("lock %q still held or queued with no sessions", name)
		}
	}
}
