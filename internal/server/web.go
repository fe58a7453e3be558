package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
	"github.com/leasehold/leasehold/internal/metrics"
	"github.com/leasehold/leasehold/internal/web"
)

// webMaxLocks and webMaxSessions bound the locks (in name order) and the
// sessions (in lease id order) one dashboard view lists; webKVPage the
// fenced keys of one page of the KV browser.
const (
	webMaxLocks    = 1000
	webMaxSessions = 1000
	webKVPage      = 100
)

// publishWeb feeds the dashboard: every lock event, and every fenced KV
// write with its outcome. It runs on the apply goroutine and never blocks.
func (s *Server) publishWeb(index uint64, res *fsm.Result) {
	for _, ev := range res.Events {
		s.feed.Publish(web.Event{
			Type: metrics.EventLabel(ev.Type),
			Name: ev.Name, LeaseID: ev.LeaseID, Owner: ev.Owner, Token: ev.Token, Index: ev.Index, UnixMs: ev.UnixMs,
		})
	}
	if w, ok := metrics.KVWriteOf(res); ok {
		ev := web.Event{Type: "kv_refused", Name: w.Key, Token: w.Token, LastToken: w.LastToken, Reason: w.Result, Index: index, UnixMs: s.clock.Now().UnixMilli()}
		if w.Result == "accepted" {
			ev.Type, ev.Reason = "kv_accepted", ""
		}
		s.feed.Publish(ev)
	}
}

// webSource serves the dashboard's view of this node.
type webSource struct{ s *Server }

// Viewer: with auth enabled, the dashboard needs read (lock names) or
// kv-read (KV keys) on some prefix and shows only what those cover; admin
// sees everything. With auth disabled everyone is an admin, as in the API.
func (w webSource) Viewer(ctx context.Context) web.Viewer {
	pol, p := w.s.policies(), principalFrom(ctx)
	v := web.Viewer{Auth: pol.On(), Principal: p.String(), Admin: pol.IsAdmin(p)}
	if p.Name == "" {
		v.Principal = ""
	}
	v.View = v.Admin || pol.AllowAny(p, auth.PermRead) || pol.AllowAny(p, auth.PermKVRead)
	if !v.Admin {
		v.SeesName = func(name string) bool { return pol.Allow(p, auth.PermRead, name) }
		v.SeesKey = func(key string) bool { return pol.Allow(p, auth.PermKVRead, key) }
	}
	return v
}

// KV lists one page of the fenced keys v may read.
func (w webSource) KV(_ context.Context, v web.Viewer, prefix, after string) (web.KVPage, error) {
	if len(prefix) > MaxNameLen || len(after) > MaxNameLen {
		return web.KVPage{}, api.Errorf(api.CodeInvalidArgument, "prefix and after are at most %d bytes", MaxNameLen)
	}
	page := web.KVPage{Keys: []web.KV{}}
	w.s.node.Read(func(m *fsm.Machine) {
		kvs, more := m.KVPage(prefix, after, v.SeesKey, webKVPage)
		for _, kv := range kvs {
			val := kv.GetValue()
			e := web.KV{Key: kv.GetKey(), Token: kv.GetToken(), Deleted: kv.GetDeleted(), Size: len(val), Cut: len(val) > web.PreviewBytes}
			e.Value = strings.ToValidUTF8(string(val[:min(len(val), web.PreviewBytes)]), string(utf8.RuneError))
			page.Keys = append(page.Keys, e)
		}
		if more && len(kvs) > 0 {
			page.Next = kvs[len(kvs)-1].GetKey()
		}
	})
	return page, nil
}

// adminAction runs an action of the dashboard for an admin alone, audited
// as the API's administrative actions are.
func (w webSource) adminAction(ctx context.Context, what string, run func() error) error {
	p := principalFrom(ctx)
	if pol := w.s.policies(); !pol.IsAdmin(p) {
		w.s.auditLog().Warn("audit", "action", what, "principal", p.String(), "result", "denied")
		return api.Errorf(api.CodePermissionDenied, "%s may not %s from the dashboard (needs admin)", p, what)
	}
	err := run()
	w.s.auditAdmin(ctx, what, err)
	return err
}

// ForceRelease releases a holding as its session's Release would.
func (w webSource) ForceRelease(ctx context.Context, name, leaseID string, token uint64) error {
	return w.adminAction(ctx, "ui-force-release", func() error {
		_, err := (&lockService{w.s}).Release(ctx, connect.NewRequest(&pb.ReleaseRequest{Name: name, LeaseId: leaseID, Token: token}))
		return err
	})
}

// EndSession closes a session, releasing its holdings and leaving its queues.
func (w webSource) EndSession(ctx context.Context, leaseID string) error {
	return w.adminAction(ctx, "ui-end-session", func() error {
		_, err := (&lockService{w.s}).CloseSession(ctx, connect.NewRequest(&pb.CloseSessionRequest{LeaseId: leaseID}))
		return err
	})
}

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

func (w webSource) State(ctx context.Context, v web.Viewer) (web.State, error) {
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
		locks, st.Truncated = m.LockPage(v.SeesName, webMaxLocks)
		for _, l := range locks {
			if h := l.Holder; h != nil {
				ttl[h.GetLeaseId()] = m.Session(h.GetLeaseId()).GetTtlMs()
			}
			for _, wt := range l.Waiters {
				owner[wt.GetLeaseId()] = m.Owner(wt.GetLeaseId())
			}
		}
		if v.Admin {
			page, more := m.SessionPage(webMaxSessions)
			for _, ss := range page {
				sessions = append(sessions, web.Session{LeaseID: ss.GetLeaseId(), Owner: ss.GetOwner(), TTLMs: ss.GetTtlMs()})
			}
			st.SessionsTruncated, st.SessionCount, st.LockCount = more, m.SessionCount(), m.LockCount()
		} else {
			st.LockCount = len(locks) // of the names it sees; the rest is not its to count
		}
		st.Token = m.Token()
	})
	lease := func(id string) string { // lease ids are an admin's to see
		if v.Admin {
			return id
		}
		return ""
	}
	for _, l := range locks {
		wl := web.Lock{Name: l.Name, RemainingMs: -1, Queue: []web.Waiter{}, LockDelay: l.Delayed, DelayMs: l.DelayMs, DelayToken: l.DelayToken, Holders: []web.Holder{}, Permits: max(l.Permits, 1)}
		if h := l.Holder; h != nil {
			wl.Owner, wl.LeaseID, wl.Token, wl.TTLMs = l.Owner, lease(h.GetLeaseId()), h.GetToken(), ttl[h.GetLeaseId()]
			wl.RemainingMs = remaining(h.GetLeaseId())
		}
		for i, h := range l.Holders {
			wl.Holders = append(wl.Holders, web.Holder{
				LeaseID: lease(h.GetLeaseId()), Owner: l.Owners[i], Token: h.GetToken(), Mode: modeName(h.GetMode()), Slot: h.GetSlot(),
				RemainingMs: remaining(h.GetLeaseId()), AcquiredUnixMs: h.GetAcquiredUnixMs(),
			})
		}
		for _, wt := range l.Waiters {
			wl.Queue = append(wl.Queue, web.Waiter{LeaseID: lease(wt.GetLeaseId()), Owner: owner[wt.GetLeaseId()], Mode: modeName(wt.GetMode()), QueuedUnixMs: wt.GetQueuedUnixMs()})
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
	st.Members = []web.Member{}
	if !v.Admin { // as the API's Members, the cluster's layout is an admin's
		return st, nil
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

// modeName names a holding's or a waiter's mode for the dashboard.
func modeName(m fsmpb.Mode) string {
	if m == fsmpb.Mode_MODE_SHARED {
		return "shared"
	}
	return "exclusive"
}
