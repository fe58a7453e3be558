// Package web is leasehold's dashboard: static files embedded in the
// binary (no build step), a JSON snapshot of the node's view and a
// server-sent event stream of what the cluster applies.
//
//	GET /ui/              the page (index.html, app.js, style.css)
//	GET /ui/api/state     State as JSON: locks, sessions, cluster
//	GET /ui/api/raft      this node's Raft progress alone (what a node's
//	                      State asks the other members for)
//	GET /ui/api/events    text/event-stream of Event, the last Backlog
//	                      events first; resumes after Last-Event-ID
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
	LeaseID string `json:"lease_id,omitempty"`
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
}

// Waiter is one queued session.
type Waiter struct {
	LeaseID string `json:"lease_id"`
	Owner   string `json:"owner,omitempty"`
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

// Source is what the dashboard shows. Its methods must be safe for
// concurrent use.
type Source interface {
	State(ctx context.Context) (State, error)
	// Raft is this node's Raft progress.
	Raft() Raft
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

// Handler serves the dashboard under /ui/. Event streams end when done is
// closed (the server is shutting down) or the client goes away.
func Handler(src Source, feed *Feed, done <-chan struct{}) http.Handler {
	mux := http.NewServeMux()
	sub, _ := fs.Sub(static, "static")
	mux.Handle("GET /ui/", http.StripPrefix("/ui/", http.FileServerFS(sub)))
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusFound))
	mux.HandleFunc("GET /ui/api/state", func(w http.ResponseWriter, r *http.Request) {
		st, err := src.State(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(st)
	})
	mux.HandleFunc("GET /ui/api/raft", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(src.Raft())
	})
	mux.HandleFunc("GET /ui/api/events", func(w http.ResponseWriter, r *http.Request) {
		serveEvents(w, r, feed, done)
	})
	return mux
}

func serveEvents(w http.ResponseWriter, r *http.Request, feed *Feed, done <-chan struct{}) {
	rc := http.NewResponseController(w)
	after, _ := strconv.ParseUint(r.Header.Get("Last-Event-ID"), 10, 64)
	backlog, ch, cancel := feed.subscribe(after)
	defer cancel()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	send := func(ev Event) error {
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
