// Package web is leasehold's dashboard: static files embedded in the
// binary (no build step), a JSON snapshot of the node's view and a
// server-sent event stream of what the cluster applies.
//
//	GET  /ui/                 the page (index.html, app.js, style.css)
//	GET  /ui/api/viewer       Viewer: whether auth is on, who asks, and
//	                          whether they may view and administer
//	GET  /ui/api/state        State as JSON: locks, sessions, cluster
//	GET  /ui/api/raft         this node's Raft progress alone (what a node's
//	                          State asks the other members for)
//	GET  /ui/api/events       text/event-stream of Event, the last Backlog
//	                          events first; resumes after Last-Event-ID
//	GET  /ui/api/kv           KVPage: ?prefix=P&after=K, fenced keys in order
//	POST /ui/api/release      force-release {name, lease_id, token} (admin)
//	POST /ui/api/end-session  end the session {lease_id} (admin)
//
// The page and /ui/api/viewer are open to anyone; every other call is
// answered only when the Viewer may view, and shows it only the names it
// may read. The page sends a token as "Authorization: Bearer" (kept in the
// tab's sessionStorage, never a cookie, so no other site can make the
// browser send it). Errors are JSON {"code", "message"} with the api code.
//
// NodeSource is the Source of a node: it assembles the views from the
// applied state (a Read func over the fsm.Machine) and asks the server,
// through funcs, for the caller, the members and the admin actions.
//
// The server feeds events in with Feed.Publish from raft's apply goroutine;
// Publish never blocks. A subscriber that falls behind by more than its
// buffer is dropped: its stream ends and the browser's EventSource
// reconnects with Last-Event-ID, so it misses nothing the backlog still
// holds.
package web

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"strconv"
	"sync"

	"github.com/leasehold/leasehold/api"
)

//go:embed static
var static embed.FS

// State is one node's view, as /ui/api/state serves it.
type State struct {
	Node     string    `json:"node"`
	LeaderID string    `json:"leader_id"`
	NowMs    int64     `json:"now_ms"` // the node's clock when the view was taken
	Token    uint64    `json:"token"`  // the newest token issued
	Raft     Raft      `json:"raft"`
	Locks    []Lock    `json:"locks"`
	Sessions []Session `json:"sessions"`
	Members  []Member  `json:"members"`
	// Truncated is true when more locks exist than Locks lists (the first
	// 1000 in name order); LockCount is how many exist.
	Truncated bool `json:"truncated"`
	LockCount int  `json:"lock_count"`
	// SessionsTruncated is true when more sessions are live than Sessions
	// lists (the first 1000 in lease id order); SessionCount is how many are.
	SessionsTruncated bool `json:"sessions_truncated"`
	SessionCount      int  `json:"session_count"`
}

// Raft is this node's raft progress.
type Raft struct {
	Role         string `json:"role"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	// LastContactMs is the time since the leader was last heard from: 0 on
	// the leader, -1 when never.
	LastContactMs int64 `json:"last_contact_ms"`
}

// Lock is one lock name: held, queued for, or in lock-delay.
type Lock struct {
	Name    string `json:"name"`
	Owner   string `json:"owner,omitempty"`
	LeaseID string `json:"lease_id,omitempty"` // empty unless the viewer is an admin
	Token   uint64 `json:"token,omitempty"`
	// RemainingMs is the holder's session time left on the leader's timer
	// (-1 when this node does not lead and so does not know it).
	RemainingMs int64    `json:"remaining_ms"`
	TTLMs       int64    `json:"ttl_ms,omitempty"`
	Queue       []Waiter `json:"queue"`
	LockDelay   bool     `json:"lock_delay"`
	DelayMs     int64    `json:"lock_delay_ms,omitempty"`
	DelayToken  uint64   `json:"lock_delay_token,omitempty"`
	// Holders are every holding of the name in grant order (Owner, LeaseID,
	// Token above are the first's): the readers of a read lock, the
	// permit holders of a semaphore.
	Holders []Holder `json:"holders"`
	Permits uint32   `json:"permits"` // 1 for a lock, N for a semaphore
}

// Holder is one holding of a lock name.
type Holder struct {
	LeaseID string `json:"lease_id"`
	Owner   string `json:"owner,omitempty"`
	Token   uint64 `json:"token"`
	Mode    string `json:"mode"` // exclusive or shared
	// Slot is the permit a semaphore holding occupies (NAME/slot/K).
	Slot        uint32 `json:"slot"`
	RemainingMs int64  `json:"remaining_ms"` // -1 when unknown (see Lock)
	// AcquiredUnixMs is when it was granted, on the leader's wall clock:
	// the page shows State.NowMs minus it as the time held.
	AcquiredUnixMs int64 `json:"acquired_unix_ms"`
}

// Waiter is one queued session, in queue order.
type Waiter struct {
	LeaseID string `json:"lease_id,omitempty"` // empty unless the viewer is an admin
	Owner   string `json:"owner,omitempty"`
	Mode    string `json:"mode"` // exclusive or shared
	// QueuedUnixMs is when it queued, on the leader's wall clock.
	QueuedUnixMs int64 `json:"queued_unix_ms"`
}

// Session is one live session.
type Session struct {
	LeaseID     string `json:"lease_id"`
	Owner       string `json:"owner,omitempty"`
	TTLMs       int64  `json:"ttl_ms"`
	RemainingMs int64  `json:"remaining_ms"` // -1 when unknown (see Lock)
}

// Member is one voter as this node sees it.
type Member struct {
	ID           string `json:"id"`
	RaftAddr     string `json:"raft_addr"`
	APIAddr      string `json:"api_addr"`
	Role         string `json:"role"` // leader, follower, candidate, or unreachable (did not answer)
	Suffrage     string `json:"suffrage"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	// LastContactMs is the member's own Raft.LastContactMs; -2 when the
	// member did not answer.
	LastContactMs int64 `json:"last_contact_ms"`
}

// Event is one entry of the live feed.
type Event struct {
	Seq uint64 `json:"seq"` // this node's feed sequence (SSE id)
	// Type is a lock event (acquired, released, expired, queued, dequeued,
	// lock_delay_ended) or a fenced KV write: kv_accepted, kv_refused.
	Type    string `json:"type"`
	Name    string `json:"name"` // lock name, or the KV key of a write
	LeaseID string `json:"lease_id,omitempty"`
	Owner   string `json:"owner,omitempty"`
	Token   uint64 `json:"token,omitempty"`
	// LastToken is the token the key holds when a write was refused.
	LastToken uint64 `json:"last_token,omitempty"`
	// Reason is the refusal's code (stale-token, invalid-token, ...).
	Reason string `json:"reason,omitempty"`
	Index  uint64 `json:"index"`   // the raft log index that applied it
	UnixMs int64  `json:"unix_ms"` // the leader's wall clock (display only)
}

// Viewer is the caller of a request, as the server authenticated it.
type Viewer struct {
	// Auth is whether auth is enabled: the page asks for a token.
	Auth bool `json:"auth"`
	// Principal names the caller ("" when anonymous).
	Principal string `json:"principal,omitempty"`
	// View is whether the caller may see the dashboard's data; Admin whether
	// it may also see sessions, members and lease ids and force-release.
	View  bool `json:"view"`
	Admin bool `json:"admin"`
	// SeesName and SeesKey report whether the caller may read a lock name
	// or a fenced KV key (nil: every one).
	SeesName func(name string) bool `json:"-"`
	SeesKey  func(key string) bool  `json:"-"`
}

// sees reports whether v may see ev: its lock name or its KV key.
func (v Viewer) sees(ev Event) bool {
	if ev.Type == "kv_accepted" || ev.Type == "kv_refused" {
		return v.SeesKey == nil || v.SeesKey(ev.Name)
	}
	return v.SeesName == nil || v.SeesName(ev.Name)
}

// KV is one fenced key.
type KV struct {
	Key     string `json:"key"`
	Token   uint64 `json:"token"`   // the last token the key accepted
	Deleted bool   `json:"deleted"` // a tombstone: the token keeps the fence
	Size    int    `json:"size"`    // the value's length in bytes
	// Value is the first PreviewBytes of the value as text (invalid UTF-8
	// replaced); Cut says the value is longer.
	Value string `json:"value"`
	Cut   bool   `json:"cut,omitempty"`
}

// PreviewBytes is how much of a value KVPage shows.
const PreviewBytes = 256

// KVPage is one page of fenced keys, in key order.
type KVPage struct {
	Keys []KV `json:"keys"`
	// Next is the last key listed when more follow (the next page's
	// after=), "" on the last page.
	Next string `json:"next,omitempty"`
}

// Source is what the dashboard shows. Its methods must be safe for
// concurrent use; ctx carries the request's authenticated caller.
type Source interface {
	// Viewer describes the caller of ctx.
	Viewer(ctx context.Context) Viewer
	// State is the view for v: only the names it sees, and sessions,
	// members and lease ids for an admin alone.
	State(ctx context.Context, v Viewer) (State, error)
	// Raft is this node's Raft progress.
	Raft() Raft
	// KV lists the fenced keys v sees under prefix after after.
	KV(ctx context.Context, v Viewer, prefix, after string) (KVPage, error)
	// ForceRelease ends the holding of name by leaseID with token, and
	// EndSession ends a session with its holdings; both refuse a caller
	// that is not an admin with the code permission-denied.
	ForceRelease(ctx context.Context, name, leaseID string, token uint64) error
	EndSession(ctx context.Context, leaseID string) error
}

// Backlog is how many events a Feed keeps for new subscribers.
const Backlog = 1000

// subscriberBuffer is how many events a subscriber may fall behind.
const subscriberBuffer = 256

// Feed fans events out to event streams and keeps the last Backlog.
type Feed struct {
	mu   sync.Mutex // protects following
	seq  uint64
	ring []Event // the last Backlog events; once full, the oldest at ring[head]
	head int
	subs map[chan Event]struct{}
}

// NewFeed returns an empty Feed.
func NewFeed() *Feed { return &Feed{subs: map[chan Event]struct{}{}} }

// Publish numbers ev and hands it to every subscriber without blocking; a
// subscriber whose buffer is full is dropped (its channel closed).
func (f *Feed) Publish(ev Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	ev.Seq = f.seq
	if len(f.ring) < Backlog {
		f.ring = append(f.ring, ev)
	} else {
		f.ring[f.head] = ev
		f.head = (f.head + 1) % Backlog
	}
	for ch := range f.subs {
		select {
		case ch <- ev:
		default:
			delete(f.subs, ch)
			close(ch)
		}
	}
}

// subscribe returns the kept events after seq and a channel of the events
// that follow; cancel ends the subscription.
func (f *Feed) subscribe(after uint64) (backlog []Event, ch chan Event, cancel func()) {
	ch = make(chan Event, subscriberBuffer)
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.ring {
		if ev := f.ring[(f.head+i)%len(f.ring)]; ev.Seq > after {
			backlog = append(backlog, ev)
		}
	}
	f.subs[ch] = struct{}{}
	return backlog, ch, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.subs[ch]; ok {
			delete(f.subs, ch)
			close(ch)
		}
	}
}

// Subscribers is the number of open event streams.
func (f *Feed) Subscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

// maxActionBytes bounds the body of an admin action.
const maxActionBytes = 4096

// Handler serves the dashboard under /ui/. Event streams end when done is
// closed (the server is shutting down) or the client goes away.
func Handler(src Source, feed *Feed, done <-chan struct{}) http.Handler {
	mux := http.NewServeMux()
	sub, _ := fs.Sub(static, "static")
	mux.Handle("GET /ui/", http.StripPrefix("/ui/", http.FileServerFS(sub)))
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusFound))
	mux.HandleFunc("GET /ui/api/viewer", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, src.Viewer(r.Context()))
	})
	// viewing serves h to a caller that may view the dashboard.
	viewing := func(h func(http.ResponseWriter, *http.Request, Viewer)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			v := src.Viewer(r.Context())
			if !v.View {
				writeError(w, api.Errorf(api.CodePermissionDenied, "%s may not view the dashboard: it needs the permission read on some prefix (or admin)", principalName(v)))
				return
			}
			h(w, r, v)
		}
	}
	mux.HandleFunc("GET /ui/api/state", viewing(func(w http.ResponseWriter, r *http.Request, v Viewer) {
		st, err := src.State(r.Context(), v)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, st)
	}))
	mux.HandleFunc("GET /ui/api/raft", viewing(func(w http.ResponseWriter, _ *http.Request, _ Viewer) {
		writeJSON(w, src.Raft())
	}))
	mux.HandleFunc("GET /ui/api/kv", viewing(func(w http.ResponseWriter, r *http.Request, v Viewer) {
		page, err := src.KV(r.Context(), v, r.URL.Query().Get("prefix"), r.URL.Query().Get("after"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, page)
	}))
	mux.HandleFunc("GET /ui/api/events", viewing(func(w http.ResponseWriter, r *http.Request, v Viewer) {
		serveEvents(w, r, feed, v, done)
	}))
	mux.HandleFunc("POST /ui/api/release", viewing(func(w http.ResponseWriter, r *http.Request, _ Viewer) {
		var req struct {
			Name    string `json:"name"`
			LeaseID string `json:"lease_id"`
			Token   uint64 `json:"token"`
		}
		if readAction(w, r, &req) {
			writeDone(w, src.ForceRelease(r.Context(), req.Name, req.LeaseID, req.Token))
		}
	}))
	mux.HandleFunc("POST /ui/api/end-session", viewing(func(w http.ResponseWriter, r *http.Request, _ Viewer) {
		var req struct {
			LeaseID string `json:"lease_id"`
		}
		if readAction(w, r, &req) {
			writeDone(w, src.EndSession(r.Context(), req.LeaseID))
		}
	}))
	return mux
}

func principalName(v Viewer) string {
	if v.Principal == "" {
		return "anonymous"
	}
	return v.Principal
}

// readAction decodes an admin action's JSON body into req, or answers
// invalid-argument and returns false.
func readAction(w http.ResponseWriter, r *http.Request, req any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxActionBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		writeError(w, api.Errorf(api.CodeInvalidArgument, "the body must be a JSON object of the action's fields: %v", err))
		return false
	}
	return true
}

func writeDone(w http.ResponseWriter, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, struct{}{})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers err as {"code", "message"} with its HTTP status.
func writeError(w http.ResponseWriter, err error) {
	e := api.FromError(err)
	status := http.StatusServiceUnavailable
	switch e.Code {
	case api.CodePermissionDenied:
		status = http.StatusForbidden
	case api.CodeInvalidArgument:
		status = http.StatusBadRequest
	case api.CodeNotHolder, api.CodeLeaseExpired, api.CodeNotFound:
		status = http.StatusConflict // gone since the page last showed it
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set(api.CodeHeader, string(e.Code))
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Code    api.Code `json:"code"`
		Message string   `json:"message"`
	}{e.Code, e.Message})
}

func serveEvents(w http.ResponseWriter, r *http.Request, feed *Feed, v Viewer, done <-chan struct{}) {
	rc := http.NewResponseController(w)
	after, _ := strconv.ParseUint(r.Header.Get("Last-Event-ID"), 10, 64)
	backlog, ch, cancel := feed.subscribe(after)
	defer cancel()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	send := func(ev Event) error {
		if !v.sees(ev) {
			return nil
		}
		if !v.Admin {
			ev.LeaseID = ""
		}
		data, _ := json.Marshal(ev)
		_, err := fmt.Fprintf(w, "id: %d\ndata: %s\n\n", ev.Seq, data)
		return err
	}
	for _, ev := range backlog {
		if send(ev) != nil {
			return
		}
	}
	if _, err := fmt.Fprint(w, ": live\n\n"); err != nil || rc.Flush() != nil {
		return
	}
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return // dropped for lagging: the browser reconnects
			}
			if send(ev) != nil || rc.Flush() != nil {
				return
			}
		case <-r.Context().Done():
			return
		case <-done:
			return
		}
	}
}
