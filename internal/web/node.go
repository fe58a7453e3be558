package web

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// maxLocks and maxSessions bound the locks (in name order) and the
// sessions (in lease id order) one dashboard view lists; kvPageSize the
// fenced keys of one page of the KV browser.
const (
	maxLocks    = 1000
	maxSessions = 1000
	kvPageSize  = 100
)

// NodeSource is the Source of one node: it assembles the views from the
// node's applied state and its lessor, and asks the server, through the
// funcs below, for what only the server knows (the caller, the cluster,
// the administrative actions). Every func must be safe for concurrent use.
type NodeSource struct {
	// NodeID names this node; Leader the leader it knows ("" when none).
	NodeID string
	Leader func() string
	// Read runs f on the applied state under its read lock, which every
	// apply waits for: f must read only what one view lists.
	Read func(f func(m *fsm.Machine))
	// Now is the node's clock (State.NowMs).
	Now func() time.Time
	// Remaining is a session's time left on the leader's timer; false
	// when this node does not know it (it does not lead).
	Remaining func(leaseID string) (time.Duration, bool)
	// Progress is this node's Raft progress.
	Progress func() Raft
	// Members lists the cluster's voters as the API's Members answers.
	Members func(ctx context.Context) ([]*pb.Member, error)
	// Client and PeerURL reach another member's dashboard (its
	// /ui/api/raft): PeerURL gives the base URL of the API at an address.
	Client  *http.Client
	PeerURL func(apiAddr string) string
	// Policies are the compiled auth policies (nil: auth is disabled);
	// Principal is the authenticated caller of a request's ctx.
	Policies  func() *auth.Policies
	Principal func(ctx context.Context) auth.Principal
	// Audit gets a WARN line for every administrative action refused;
	// AuditAdmin records one that ran (err: its failure).
	Audit      *slog.Logger
	AuditAdmin func(ctx context.Context, action string, err error)
	// Release and CloseSession run the API's Release and CloseSession for
	// the caller of ctx.
	Release      func(ctx context.Context, name, leaseID string, token uint64) error
	CloseSession func(ctx context.Context, leaseID string) error
	// MaxNameLen bounds a KV page's prefix and after (bytes).
	MaxNameLen int
}

// Viewer: with auth enabled, the dashboard needs read (lock names) or
// kv-read (KV keys) on some prefix and shows only what those cover; admin
// sees everything. With auth disabled everyone is an admin, as in the API.
func (n *NodeSource) Viewer(ctx context.Context) Viewer {
	pol, p := n.Policies(), n.Principal(ctx)
	v := Viewer{Auth: pol.On(), Principal: p.String(), Admin: pol.IsAdmin(p)}
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
func (n *NodeSource) KV(_ context.Context, v Viewer, prefix, after string) (KVPage, error) {
	if len(prefix) > n.MaxNameLen || len(after) > n.MaxNameLen {
		return KVPage{}, api.Errorf(api.CodeInvalidArgument, "prefix and after are at most %d bytes", n.MaxNameLen)
	}
	page := KVPage{Keys: []KV{}}
	n.Read(func(m *fsm.Machine) {
		kvs, more := m.KVPage(prefix, after, v.SeesKey, kvPageSize)
		for _, kv := range kvs {
			val := kv.GetValue()
			e := KV{Key: kv.GetKey(), Token: kv.GetToken(), Deleted: kv.GetDeleted(), Size: len(val), Cut: len(val) > PreviewBytes}
			e.Value = strings.ToValidUTF8(string(val[:min(len(val), PreviewBytes)]), string(utf8.RuneError))
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
func (n *NodeSource) adminAction(ctx context.Context, what string, run func() error) error {
	p := n.Principal(ctx)
	if pol := n.Policies(); !pol.IsAdmin(p) {
		n.Audit.Warn("audit", "action", what, "principal", p.String(), "result", "denied")
		return api.Errorf(api.CodePermissionDenied, "%s may not %s from the dashboard (needs admin)", p, what)
	}
	err := run()
	n.AuditAdmin(ctx, what, err)
	return err
}

// ForceRelease releases a holding as its session's Release would.
func (n *NodeSource) ForceRelease(ctx context.Context, name, leaseID string, token uint64) error {
	return n.adminAction(ctx, "ui-force-release", func() error {
		return n.Release(ctx, name, leaseID, token)
	})
}

// EndSession closes a session, releasing its holdings and leaving its queues.
func (n *NodeSource) EndSession(ctx context.Context, leaseID string) error {
	return n.adminAction(ctx, "ui-end-session", func() error {
		return n.CloseSession(ctx, leaseID)
	})
}

// Raft is this node's Raft progress.
func (n *NodeSource) Raft() Raft { return n.Progress() }

// memberRaft asks the member at apiAddr for its Raft progress.
func (n *NodeSource) memberRaft(ctx context.Context, apiAddr string) (Raft, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.PeerURL(apiAddr)+"/ui/api/raft", nil)
	if err != nil {
		return Raft{}, err
	}
	resp, err := n.Client.Do(req)
	if err != nil {
		return Raft{}, err
	}
	defer resp.Body.Close()
	var r Raft
	if resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("%s: HTTP %d", apiAddr, resp.StatusCode)
	}
	return r, json.NewDecoder(resp.Body).Decode(&r)
}

// State is the view for v (Source.State).
func (n *NodeSource) State(ctx context.Context, v Viewer) (State, error) {
	st := State{Node: n.NodeID, NowMs: n.Now().UnixMilli(), Raft: n.Raft()}
	st.LeaderID = n.Leader()
	remaining := func(leaseID string) int64 {
		if d, ok := n.Remaining(leaseID); ok {
			return d.Milliseconds()
		}
		return -1
	}
	var locks []fsm.LockInfo
	var sessions []Session
	ttl := map[string]int64{}    // of the listed locks' first holders
	owner := map[string]string{} // of the listed locks' waiters
	// Under the state's read lock, which every apply waits for: only what
	// one view lists is read, whatever the number of locks and sessions.
	n.Read(func(m *fsm.Machine) {
		locks, st.Truncated = m.LockPage(v.SeesName, maxLocks)
		for _, l := range locks {
			if h := l.Holder; h != nil {
				ttl[h.GetLeaseId()] = m.Session(h.GetLeaseId()).GetTtlMs()
			}
			for _, wt := range l.Waiters {
				owner[wt.GetLeaseId()] = m.Owner(wt.GetLeaseId())
			}
		}
		if v.Admin {
			page, more := m.SessionPage(maxSessions)
			for _, ss := range page {
				sessions = append(sessions, Session{LeaseID: ss.GetLeaseId(), Owner: ss.GetOwner(), TTLMs: ss.GetTtlMs()})
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
		wl := Lock{Name: l.Name, RemainingMs: -1, Queue: []Waiter{}, LockDelay: l.Delayed, DelayMs: l.DelayMs, DelayToken: l.DelayToken, Holders: []Holder{}, Permits: max(l.Permits, 1)}
		if h := l.Holder; h != nil {
			wl.Owner, wl.LeaseID, wl.Token, wl.TTLMs = l.Owner, lease(h.GetLeaseId()), h.GetToken(), ttl[h.GetLeaseId()]
			wl.RemainingMs = remaining(h.GetLeaseId())
		}
		for i, h := range l.Holders {
			wl.Holders = append(wl.Holders, Holder{
				LeaseID: lease(h.GetLeaseId()), Owner: l.Owners[i], Token: h.GetToken(), Mode: modeName(h.GetMode()), Slot: h.GetSlot(),
				RemainingMs: remaining(h.GetLeaseId()), AcquiredUnixMs: h.GetAcquiredUnixMs(),
			})
		}
		for _, wt := range l.Waiters {
			wl.Queue = append(wl.Queue, Waiter{LeaseID: lease(wt.GetLeaseId()), Owner: owner[wt.GetLeaseId()], Mode: modeName(wt.GetMode()), QueuedUnixMs: wt.GetQueuedUnixMs()})
		}
		st.Locks = append(st.Locks, wl)
	}
	for i := range sessions {
		sessions[i].RemainingMs = remaining(sessions[i].LeaseID)
	}
	st.Sessions = sessions
	if st.Locks == nil {
		st.Locks = []Lock{}
	}
	if st.Sessions == nil {
		st.Sessions = []Session{}
	}
	st.Members = []Member{}
	if !v.Admin { // as the API's Members, the cluster's layout is an admin's
		return st, nil
	}
	members, err := n.Members(ctx)
	if err != nil {
		return st, err
	}
	st.Members = make([]Member, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wm := &st.Members[i]
		*wm = Member{
			ID: m.GetId(), RaftAddr: m.GetRaftAddr(), APIAddr: m.GetApiAddr(), Role: m.GetRole(), Suffrage: m.GetSuffrage(),
			Term: m.GetTerm(), CommitIndex: m.GetCommitIndex(), AppliedIndex: m.GetAppliedIndex(), LastContactMs: -2,
		}
		switch {
		case m.GetId() == n.NodeID:
			wm.LastContactMs = st.Raft.LastContactMs
		case m.GetApiAddr() != "":
			wg.Go(func() {
				if r, err := n.memberRaft(ctx, m.GetApiAddr()); err == nil {
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
