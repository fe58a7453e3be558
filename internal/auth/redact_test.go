package auth

import (
	"testing"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
)

func TestRedact(t *testing.T) {
	pol := testPolicies()
	owner := sessions(map[string]string{"L-alice": "alice", "L-bob": "bob"})
	info := func() *pb.LockInfo {
		return &pb.LockInfo{
			Name:    "report:1",
			Holder:  &pb.Holding{LeaseId: "L-bob", Owner: "worker-B", Token: 7},
			Holders: []*pb.Holding{{LeaseId: "L-alice", Token: 7}, {LeaseId: "L-bob", Token: 8}},
			Waiters: []*pb.Waiter{{LeaseId: "L-alice"}, {LeaseId: "L-gone"}},
		}
	}
	// what alice sees of info(): her lease ids only.
	check := func(t *testing.T, li *pb.LockInfo) {
		t.Helper()
		if li.GetHolder().GetLeaseId() != "" || li.GetHolder().GetOwner() != "worker-B" || li.GetHolder().GetToken() != 7 {
			t.Errorf("holder = %v, want bob's lease id hidden, owner and token kept", li.GetHolder())
		}
		if li.GetHolders()[0].GetLeaseId() != "L-alice" || li.GetHolders()[1].GetLeaseId() != "" {
			t.Errorf("holders = %v, want alice's lease id only", li.GetHolders())
		}
		if li.GetWaiters()[0].GetLeaseId() != "L-alice" || li.GetWaiters()[1].GetLeaseId() != "" {
			t.Errorf("waiters = %v, want alice's lease id only (an unknown session is not hers)", li.GetWaiters())
		}
	}
	alice := Principal{Name: "alice"}

	st := &pb.StatusResponse{Lock: info()}
	Redact(pol, alice, st, owner)
	check(t, st.GetLock())

	ls := &pb.ListResponse{Locks: []*pb.LockInfo{info(), info()}}
	Redact(pol, alice, ls, owner)
	for _, li := range ls.GetLocks() {
		check(t, li)
	}

	wc := &pb.WatchResponse{Compacted: &pb.WatchCompacted{Locks: []*pb.LockInfo{info()}}}
	Redact(pol, alice, wc, owner)
	check(t, wc.GetCompacted().GetLocks()[0])

	for id, want := range map[string]string{"L-bob": "", "L-alice": "L-alice"} {
		we := &pb.WatchResponse{Event: &pb.Event{LeaseId: id, Owner: "o"}}
		Redact(pol, alice, we, owner)
		if got := we.GetEvent().GetLeaseId(); got != want {
			t.Errorf("watch event of %s: lease id %q, want %q", id, got, want)
		}
		rel := &pb.ReleaseResponse{Next: &pb.Holding{LeaseId: id}}
		Redact(pol, alice, rel, owner)
		if got := rel.GetNext().GetLeaseId(); got != want {
			t.Errorf("release's next holder %s: lease id %q, want %q", id, got, want)
		}
	}

	// An admin, and anyone with auth off, sees every lease id.
	for _, c := range []struct {
		pol *Policies
		p   Principal
	}{{pol, Principal{Name: "ops"}}, {pol, Principal{Name: NodeName, Node: true}}, {nil, alice}} {
		st := &pb.StatusResponse{Lock: info()}
		Redact(c.pol, c.p, st, owner)
		if st.GetLock().GetHolder().GetLeaseId() != "L-bob" || st.GetLock().GetWaiters()[1].GetLeaseId() != "L-gone" {
			t.Errorf("%v (auth on: %v) sees %v, want every lease id", c.p, c.pol.On(), st.GetLock())
		}
	}
}
