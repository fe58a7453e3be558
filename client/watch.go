package client

import (
	"context"
	"iter"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
)

// WatchOption configures Watch.
type WatchOption func(*watchOptions)

type watchOptions struct {
	from        uint64
	onProgress  func(uint64)
	onCompacted func(*Compacted)
}

// Compacted is the state of a watch's prefix at one log index (Index):
// every lock of the prefix as List shows it, with every entry up to Index
// applied and none after it.
type Compacted = pb.WatchCompacted

// FromIndex starts the watch at log index i: every event with index ≥ i is
// delivered (replayed from the server's history, then live). Default: the
// events applied after Watch returns.
func FromIndex(i uint64) WatchOption { return func(o *watchOptions) { o.from = i } }

// OnProgress is called, on the goroutine ranging over the events, with the
// index up to which every event of the prefix has been delivered, whenever
// a server reports its progress (when the watch starts and on an idle
// stream, every second by default). Resuming at that index + 1 (FromIndex)
// misses nothing.
func OnProgress(f func(index uint64)) WatchOption {
	return func(o *watchOptions) { o.onProgress = f }
}

// OnCompacted makes a watch whose events are no longer held resync instead
// of ending: f is called, on the goroutine ranging over the events, with
// the state of the prefix's locks at an index (which replaces every event
// up to it, including some already delivered), and the watch continues
// with the events after that index. Without it such a watch ends with
// ErrCompacted.
func OnCompacted(f func(state *Compacted)) WatchOption {
	return func(o *watchOptions) { o.onCompacted = f }
}

// Watch delivers the lock events of names with prefix, each with the log
// index of the entry that caused it, in log order. When it returns without
// error the subscription is registered on a server.
//
// Nothing is lost silently. When the stream breaks (the node stops or is
// unreachable, the connection is cut, the watcher fell too far behind and
// was ended with resource-exhausted) Watch resumes on the next endpoint from
// the last event delivered, with no gap and no duplicate; it gives up with
// ErrUnavailable when no endpoint takes the watch for the retry timeout
// (WithRetryTimeout). When the events to resume from are no longer in the
// server's history (it keeps the latest 10 000 by default) or the node
// skipped them by installing a snapshot, the server sends the current state
// of the prefix instead: with OnCompacted the watch hands it over and
// continues after its index; without it, the last pair carries an error
// matching ErrCompacted (and Watch returns it when the start index is
// already gone): read the state (List, Status) and watch again.
// Iteration ends without error when ctx ends.
func (c *Client) Watch(ctx context.Context, prefix string, opts ...WatchOption) (iter.Seq2[*Event, error], error) {
	var o watchOptions
	for _, opt := range opts {
		opt(&o)
	}
	cur := &watchCursor{live: o.from == 0, done: max(o.from, 1) - 1}
	req := &pb.WatchRequest{Prefix: prefix, ProgressNotify: true}
	resync := o.onCompacted != nil
	stream, err := c.openWatch(ctx, req, cur, false, resync)
	if err != nil {
		return nil, err
	}
	progress := func() {
		if o.onProgress != nil {
			o.onProgress(cur.done)
		}
	}
	// states hands over the states openWatch resynced to.
	states := func() {
		for _, st := range cur.states {
			o.onCompacted(st)
		}
		cur.states = nil
	}
	return func(yield func(*Event, error) bool) {
		defer func() {
			if stream != nil { // nil when a resumption failed
				stream.Close()
			}
		}()
		states()
		progress()
		for {
			resynced := false
			for stream.Receive() {
				m := stream.Msg()
				if ev := m.GetEvent(); ev != nil {
					if cur.admit(ev) && !yield(ev, nil) {
						return
					}
					continue
				}
				if st := m.GetCompacted(); st != nil {
					if resync {
						// The stream ends with compacted next.
						cur.resync(st.GetIndex())
						o.onCompacted(st)
						resynced = true
					}
					continue
				}
				cur.progress(m.GetAppliedIndex())
				progress()
			}
			err := stream.Err()
			stream.Close()
			if ctx.Err() != nil {
				return
			}
			if err != nil && !resynced {
				if e := classify(ctx, err, req); !resumable(e.Code) {
					yield(nil, opError("watch", e))
					return
				}
			}
			// A resync continues on the node that sent the state.
			stream, err = c.openWatch(ctx, req, cur, !resynced, resync)
			states()
			if err != nil {
				if ctx.Err() == nil {
					yield(nil, err)
				}
				return
			}
		}
	}, nil
}

// resumable reports whether a watch that ended with code may be resumed
// elsewhere.
func resumable(code api.Code) bool {
	switch code {
	case api.CodeUnavailable, api.CodeNotLeader, api.CodeResourceExhausted:
		return true
	}
	return false
}

// openWatch starts req at cur's resume point on the current endpoint (the
// next one when next is set, to resume), failing over between endpoints
// like call, and returns once the server registered it (its first progress
// response). A first open fails at once when every endpoint refuses the
// connection; a resume keeps trying (a node may be restarting). When the
// server answers with the state instead (compacted) and resync is set, the
// cursor moves to the state's index, the state is kept in cur.states and
// the watch is opened again from there.
func (c *Client) openWatch(ctx context.Context, req *pb.WatchRequest, cur *watchCursor, next, resync bool) (*connect.ServerStreamForClient[pb.WatchResponse], error) {
	stop := time.Now().Add(c.opts.retryTimeout)
	backoff := 10 * time.Millisecond
	first := !next
	for attempt := 1; ; attempt++ {
		if ctx.Err() != nil {
			return nil, opError("watch", &api.Error{Code: ctxCode(ctx), Message: context.Cause(ctx).Error()})
		}
		c.mu.Lock()
		if next {
			c.cur = (c.cur + 1) % len(c.eps)
			next = false
		}
		i := c.cur
		c.mu.Unlock()
		req.FromIndex = cur.resume()
		stream, err := c.eps[i].locks.Watch(ctx, connect.NewRequest(req))
		if err == nil {
			st := (*Compacted)(nil)
			if stream.Receive() {
				if st = stream.Msg().GetCompacted(); st == nil {
					cur.progress(stream.Msg().GetAppliedIndex())
					return stream, nil
				}
				for stream.Receive() { // the server ends it with compacted
				}
			}
			err = stream.Err()
			if st != nil && resync {
				stream.Close()
				cur.resync(st.GetIndex())
				cur.states = append(cur.states, st)
				attempt--
				continue
			}
			stream.Close()
			if err == nil {
				err = &api.Error{Code: api.CodeUnavailable, Message: "the watch ended before it was registered"}
			}
		}
		e := c.opts.dialHint(classify(ctx, err, req), err)
		if first && api.Refused(err) && attempt == len(c.eps) {
			return nil, opError("watch", &api.Error{Code: api.CodeUnavailable, Message: "no server at " + c.addrs()})
		}
		first = first && api.Refused(err)
		if !resumable(e.Code) || ctx.Err() != nil || time.Now().After(stop) {
			return nil, opError("watch", e)
		}
		if !c.failover(ctx, i, attempt, &backoff, err) {
			return nil, opError("watch", e)
		}
	}
}

// watchCursor is how far a watch got: the point it resumes from and the
// filter that drops what a resumed stream sends again. Events of one log
// entry are produced by the state machine in the same order on every node,
// so a stream resumed at a partly delivered index re-sends the part
// delivered first.
type watchCursor struct {
	live  bool   // no resume point yet: the first stream starts from now
	done  uint64 // every event with index ≤ done was delivered
	last  uint64 // index of the last event delivered; > done when more of it may follow
	nLast int    // events delivered with index last
	skip  int    // events of index last the current stream sends again
	// states are the states (compacted) resynced to and not handed over yet.
	states []*Compacted
}

// resume returns the from_index of the next stream and arms the filter.
func (c *watchCursor) resume() uint64 {
	if c.live {
		return 0
	}
	if c.last > c.done {
		c.skip = c.nLast
		return c.last
	}
	c.skip = 0
	return c.done + 1
}

// resync moves the cursor to a state at index i: the events up to i are
// replaced by it, and the next stream starts after it.
func (c *watchCursor) resync(i uint64) {
	c.live = false
	c.done, c.last, c.nLast, c.skip = i, i, 0, 0
}

// progress notes that every event with index ≤ i was sent on the stream.
func (c *watchCursor) progress(i uint64) {
	c.live = false
	c.done = max(c.done, i)
}

// admit reports whether ev is new, and records it.
func (c *watchCursor) admit(ev *Event) bool {
	i := ev.GetIndex()
	switch {
	case i <= c.done:
		return false
	case i == c.last:
		if c.skip > 0 {
			c.skip--
			return false
		}
		c.nLast++
		return true
	case i > c.last:
		// The stream is in log order: everything before i was sent.
		c.done = i - 1
		c.last, c.nLast, c.skip = i, 1, 0
		return true
	}
	return false
}
