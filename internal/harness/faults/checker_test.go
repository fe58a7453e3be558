//go:build leasehold_faults

package faults

import (
	"strings"
	"testing"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
)

// TestCheckerCatches feeds the history checker small histories with one
// known violation each: a checker that passes them would let every
// schedule pass whatever the cluster did.
func TestCheckerCatches(t *testing.T) {
	acq := func(idx, tok uint64, name, lease string) *pb.Event {
		return &pb.Event{Type: pb.EventType_EVENT_TYPE_ACQUIRED, Index: idx, Token: tok, Name: name, LeaseId: lease}
	}
	// held is a watch's resync state at idx: name held by lease ("" for free).
	held := func(idx uint64, name, lease string) *pb.WatchCompacted {
		l := &pb.LockInfo{Name: name}
		if lease != "" {
			l.Holder = &pb.Holding{LeaseId: lease}
		}
		return &pb.WatchCompacted{Index: idx, Locks: []*pb.LockInfo{l}}
	}
	for _, tc := range []struct {
		name, want string
		h          history
	}{
		{"internal code", "P11", history{recs: []rec{{K: "error", Op: "acquire", Code: "internal"}}}},
		{"token order in real time", "P2", history{recs: []rec{
			{K: "grant", Name: "a", Lease: "l1", Token: 5, Sent: 1, Ret: 2},
			{K: "grant", Name: "b", Lease: "l2", Token: 4, Sent: 3, Ret: 4},
		}}},
		{"token order in commit order", "P2", history{events: []*pb.Event{acq(1, 5, "a", "l1"), acq(2, 4, "b", "l2")}}},
		{"two holders", "P6", history{events: []*pb.Event{acq(1, 1, "a", "l1"), acq(2, 2, "a", "l2")}}},
		{"two holders after a resync", "P6", history{
			events:  []*pb.Event{acq(1, 1, "a", "l1"), acq(5, 3, "a", "l3")},
			resyncs: []resync{{at: 1, state: held(4, "a", "l2")}},
		}},
		{"stale write accepted", "P4", history{recs: []rec{
			{K: "put", Name: "k", Token: 5, Value: "x", Sent: 1, Ret: 2},
			{K: "put", Name: "k", Token: 4, Value: "y", Sent: 3, Ret: 4},
		}, final: map[string]rec{"k": {Token: 5, Value: "x"}}}},
		{"acknowledged write lost", "P4", history{recs: []rec{
			{K: "put", Name: "k", Token: 5, Value: "x", Sent: 1, Ret: 2},
		}, final: map[string]rec{"k": {Token: 4, Value: "old"}}}},
		{"refused write applied", "P11", history{recs: []rec{
			{K: "put", Name: "k", Token: 5, Value: "x", Code: "unavailable", Sent: 1, Ret: 2},
		}, final: map[string]rec{"k": {Token: 5, Value: "x"}}}},
		{"acknowledged grant not committed", "P5", history{recs: []rec{
			{K: "grant", Name: "a", Lease: "l1", Token: 7, Sent: 1, Ret: 2},
		}}},
	} {
		var cnt counters
		bad := tc.h.check(&cnt)
		if len(bad) == 0 || !strings.HasPrefix(bad[0], tc.want) {
			t.Errorf("%s: violations %q, want one of %s", tc.name, bad, tc.want)
		}
	}
	// A clean history passes, a paused holder's refused write included.
	clean := history{
		recs: []rec{
			{K: "grant", Name: "a", Lease: "l1", Token: 1, Sent: 1, Ret: 2},
			{K: "put", Name: "a", Token: 1, Value: "x", Sent: 3, Ret: 4},
			{K: "grant", Name: "a", Lease: "l2", Token: 2, Sent: 5, Ret: 6},
			{K: "put", Name: "a", Token: 2, Value: "y", Sent: 7, Ret: 8},
			{K: "put", Name: "a", Token: 1, Value: "z", Code: "stale-token", Sent: 9, Ret: 10},
		},
		events: []*pb.Event{acq(1, 1, "a", "l1"), {Type: pb.EventType_EVENT_TYPE_EXPIRED, Index: 2, Name: "a", LeaseId: "l1"}, acq(3, 2, "a", "l2")},
		final:  map[string]rec{"a": {Token: 2, Value: "y"}},
	}
	var cnt counters
	if bad := clean.check(&cnt); len(bad) > 0 {
		t.Errorf("a clean history: %q", bad)
	}
	if cnt.expiries != 1 || cnt.staleRejections != 1 {
		t.Errorf("counters %+v, want 1 expiry and 1 stale-token rejection", cnt)
	}
	// A watch that resynced past a release it never saw: the state says the
	// name was free, so the next grant is no second holder.
	gap := history{
		events:  []*pb.Event{acq(1, 1, "a", "l1"), acq(5, 2, "a", "l2")},
		resyncs: []resync{{at: 1, state: held(4, "a", "")}},
	}
	if bad := gap.check(&counters{}); len(bad) > 0 {
		t.Errorf("a history with a resync past a release: %q", bad)
	}
}
