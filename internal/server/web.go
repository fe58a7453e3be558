package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
	"github.com/leasehold/leasehold/internal/web"
)

// webMaxLocks and webMaxSessions bound the locks (in name order) and the
// sessions (in lease id order) one dashboard view lists.
const (
	webMaxLocks    = 1000
	webMaxSessions = 1000
)

// publishWeb feeds the dashboard: every lock event, and every fenced KV
// write with its outcome. It runs on the apply goroutine and never blocks.
func (s *Server) publishWeb(index uint64, res *fsm.Result) {
	for _, ev := range res.Events {
		s.feed.Publish(web.Event{
			Type: eventLabel(ev.Type),
			Name: ev.Name, LeaseID: ev.LeaseID, Owner: ev.Owner, Token: ev.Token, Index: ev.Index, UnixMs: ev.UnixMs,
		})
	}
	if w, ok := kvWriteOf(res); ok {
		ev := web.Event{Type: "kv_refused", Name: w.Key, Token: w.Token, LastToken: w.LastToken, Reason: w.Result, Index: index, UnixMs: s.clock.Now().UnixMilli()}
		if w.Result == "accepted" {
			ev.Type, ev.Reason = "kv_accepted", ""
		}
		s.feed.Publish(ev)
	}
}

// webSource serves the dashboard's view of this node.
type webSource struct{ s *Server }

func (w webSource) Raft() web.Raft {
	s := w.s
	self := s.selfMember()
	return web.Raft{
		Role: self.GetRole(), Term: self.GetTerm(), CommitIndex: self.GetCommitIndex(), AppliedIndex: self.GetAppliedIndex(),
		LastContactMs: int64(lastContactSeconds(s) * 1000),
	}
}

// memberRaft asks the member at apiAddr for its Raft progress.
func (w webSource) memberRaft(ctx context.Context, apiAddr string) (web.Raft, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.s.peerURL(apiAddr)+"/ui/api/raft", nil)
	if err != nil {
		return web.Raft{}, err
	}
	resp, err := w.s.http.Do(req)
	if err != nil {
		return web.Raft{}, err
	}
	defer resp.Body.Close()
	var r web.Raft
	if resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("%s: HTTP %d", apiAddr, resp.StatusCode)
	}
	return r, json.NewDecoder(resp.Body).Decode(&r)
}

func (w webSource) State(ctx context.Context) (web.State, error) {
	s := w.s
	st := web.State{Node: s.node.ID(), NowMs: s.clock.Now().UnixMilli(), Raft: w.Raft()}
	st.LeaderID, _ = s.node.Leader()
	remaining := func(leaseID string) int64 {
		if d, ok := s.lessor.Remaining(leaseID); ok {
			return d.Milliseconds()
		}
		return -1
	}
	var locks []fsm.LockInfo
	var sessions []web.Session
	ttl := map[string]int64{}    // of the listed locks' first holders
	owner := map[string]string{} // of the listed locks' waiters
	// Under the state's read lock, which every apply waits for: only what
	// one view lists is read, whatever the number of locks and sessions.
	s.node.Read(func(m *fsm.Machine) {
		locks, st.Truncated = m.List("", webMaxLocks)
		for _, l := range locks {
			if h := l.Holder; h != nil {
				ttl[h.GetLeaseId()] = m.Session(h.GetLeaseId()).GetTtlMs()
			}
			for _, wt := range l.Waiters {
				owner[wt.GetLeaseId()] = m.Owner(wt.GetLeaseId())
			}
		}
		page, more := m.SessionPage(webMaxSessions)
		for _, ss := range page {
			sessions = append(sessions, web.Session{LeaseID: ss.GetLeaseId(), Owner: ss.GetOwner(), TTLMs: ss.GetTtlMs()})
		}
		st.SessionsTruncated, st.SessionCount, st.LockCount = more, m.SessionCount(), m.LockCount()
		st.Token = m.Token()
	})
	for _, l := range locks {
		wl := web.Lock{Name: l.Name, RemainingMs: -1, Queue: []web.Waiter{}, LockDelay: l.Delayed, DelayMs: l.DelayMs, DelayToken: l.DelayToken, Holders: []web.Holder{}, Permits: max(l.Permits, 1)}
		if h := l.Holder; h != nil {
			wl.Owner, wl.LeaseID, wl.Token, wl.TTLMs = l.Owner, h.GetLeaseId(), h.GetToken(), ttl[h.GetLeaseId()]
			wl.RemainingMs = remaining(h.GetLeaseId())
		}
		for i, h := range l.Holders {
			mode := "exclusive"
			if h.GetMode() == fsmpb.Mode_MODE_SHARED {
				mode = "shared"
			}
			wl.Holders = append(wl.Holders, web.Holder{LeaseID: h.GetLeaseId(), Owner: l.Owners[i], Token: h.GetToken(), Mode: mode, Slot: h.GetSlot(), RemainingMs: remaining(h.GetLeaseId())})
		}
		for _, wt := range l.Waiters {
			wl.Queue = append(wl.Queue, web.Waiter{LeaseID: wt.GetLeaseId(), Owner: owner[wt.GetLeaseId()]})
		}
		st.Locks = append(st.Locks, wl)
	}
	for i := range sessions {
		sessions[i].RemainingMs = remaining(sessions[i].LeaseID)
	}
	st.Sessions = sessions
	if st.Locks == nil {
		st.Locks = []web.Lock{}
	}
	if st.Sessions == nil {
		st.Sessions = []web.Session{}
	}
	members, err := (&clusterService{s}).Members(ctx, connect.NewRequest(&pb.MembersRequest{}))
	if err != nil {
		return st, err
	}
	st.Members = make([]web.Member, len(members.Msg.GetMembers()))
	var wg sync.WaitGroup
	for i, m := range members.Msg.GetMembers() {
		wm := &st.Members[i]
		*wm = web.Member{
			ID: m.GetId(), RaftAddr: m.GetRaftAddr(), APIAddr: m.GetApiAddr(), Role: m.GetRole(), Suffrage: m.GetSuffrage(),
			Term: m.GetTerm(), CommitIndex: m.GetCommitIndex(), AppliedIndex: m.GetAppliedIndex(), LastContactMs: -2,
		}
		switch {
		case m.GetId() == s.node.ID():
			wm.LastContactMs = st.Raft.LastContactMs
		case m.GetApiAddr() != "":
			wg.Go(func() {
				if r, err := w.memberRaft(ctx, m.GetApiAddr()); err == nil {
					wm.LastContactMs = r.LastContactMs
				}
			})
		}
	}
	wg.Wait()
	return st, nil
}
