package auth

import pb "github.com/leasehold/leasehold/api/leaseholdv1"

// Redact removes from an answer (status, list, watch, a release's next
// holder) the lease ids of sessions that p does not own, as owner tells:
// the holder's owner label and token stay. An admin sees every lease id,
// and messages of other types are left as they are. Callers skip it when
// auth is off (pol.On() false).
func Redact(pol *Policies, p Principal, msg any, owner SessionOwner) {
	if pol.IsAdmin(p) {
		return
	}
	owns := func(leaseID string) bool {
		o, ok := owner(leaseID)
		return ok && o == p.Name
	}
	var infos []*pb.LockInfo
	switch m := msg.(type) {
	case *pb.StatusResponse:
		infos = []*pb.LockInfo{m.GetLock()}
	case *pb.ListResponse:
		infos = m.GetLocks()
	case *pb.ReleaseResponse:
		if n := m.GetNext(); n != nil && !owns(n.GetLeaseId()) {
			n.LeaseId = ""
		}
		return
	case *pb.WatchResponse:
		if e := m.GetEvent(); e != nil && e.GetLeaseId() != "" && !owns(e.GetLeaseId()) {
			e.LeaseId = ""
		}
		infos = m.GetCompacted().GetLocks()
	default:
		return
	}
	for _, li := range infos {
		if h := li.GetHolder(); h != nil && !owns(h.GetLeaseId()) {
			h.LeaseId = ""
		}
		for _, h := range li.GetHolders() { // shared holders and permits
			if !owns(h.GetLeaseId()) {
				h.LeaseId = ""
			}
		}
		for _, w := range li.GetWaiters() {
			if !owns(w.GetLeaseId()) {
				w.LeaseId = ""
			}
		}
	}
}
