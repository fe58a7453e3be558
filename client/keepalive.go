package client

import (
	"container/heap"
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
)

// Keepalives of a Client
//
// One goroutine per Client (the keeper) renews every live Session over one
// bidirectional KeepAliveStream, while the Client has sessions:
//
//	sessions ─► heap by next look (renewal or local deadline) ─► due ones batched
//	           into one KeepAliveStreamRequest{lease_ids} ─► one response, results in order
//
// Each batch is one attempt with a short deadline: min(TTL/6, 1 s) of its
// sessions, counted from when it was sent or from the stream's last answer,
// whichever is later (a stream that keeps answering is alive, however many
// batches queue behind each other). A batch not answered in time, a broken
// stream, or a retryable refusal (not-leader, unavailable) moves the stream
// to the next endpoint and sends the renewals again, until each session's
// local safe deadline decides. An answer from a follower names the leader
// (leader_api_addr); when that is one of the Client's endpoints the stream
// moves there once no batch is in flight, sparing the follower's hop,
// unless a call or stream to it went unanswered within leaderBackoff (a
// leader this client cannot reach). A renewal confirmed for a batch sent
// at t moves the session's deadline to t + TTL·(1−drift) − margin.
// lease-expired is final.
//
// Lock order: keeper.mu before Session.mu.

const (
	maxKeepAliveAttempt = time.Second
	maxKeepAliveBatch   = 1000                  // lease ids per message (the server takes 10,000)
	keepAliveRetry      = 50 * time.Millisecond // a refused renewal is sent again after this
	keepAliveCoalesce   = 50 * time.Millisecond // renewals due this soon join the current message (or within a quarter of their interval, when longer)
	maxQueuedMessages   = 1024                  // messages waiting for the stream (a million sessions)
)

type keeper struct {
	c *Client
	// httpc carries the keepalive streams on connections of their own: a
	// stream that stalls (a busy server holding flow control) never stalls
	// the Client's other calls, nor they the renewals.
	httpc *http.Client

	mu       sync.Mutex // protects following
	sessions map[*Session]struct{}
	queue    kaHeap        // every registered session, by Session.ka.at
	running  bool          // the loop goroutine runs
	quarter  time.Duration // the largest keepalive interval of a session added, over 4
	closed   bool
	wake     chan struct{} // cap 1: the loop must look at the queue again

	stop chan struct{} // closed by Client.Close
	wg   sync.WaitGroup
}

// kaState is a Session's place in its Client's keeper; protected by
// keeper.mu.
type kaState struct {
	at       time.Time // when the keeper looks at the session next
	next     time.Time // when its next renewal is due
	inflight bool      // a renewal was sent and is not answered yet
	idx      int       // heap index; -1 when off the heap
}

func newKeeper(c *Client) *keeper {
	// Its own connection (and TLS settings of the Client): a renewal never
	// waits behind other calls' flow control.
	return &keeper{
		c: c, httpc: newHTTPClient(c.opts),
		sessions: map[*Session]struct{}{}, wake: make(chan struct{}, 1), stop: make(chan struct{}),
	}
}

// add starts renewing s; its first renewal is due one interval after
// sent. On a closed Client the session is lost at once.
func (k *keeper) add(s *Session, sent time.Time) {
	k.mu.Lock()
	s.ka = kaState{next: sent.Add(s.opts.keepalive), idx: -1}
	if k.closed {
		k.mu.Unlock()
		s.lose(fmt.Errorf("%w: the client was closed", ErrLeaseLost))
		return
	}
	defer k.mu.Unlock()
	k.sessions[s] = struct{}{}
	k.quarter = max(k.quarter, s.opts.keepalive/4)
	k.scheduleLocked(s, s.Deadline())
	if !k.running {
		k.running = true
		k.wg.Go(k.loop)
	} else {
		k.poke()
	}
}

// remove stops renewing s.
func (k *keeper) remove(s *Session) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.sessions, s)
	if s.ka.idx >= 0 {
		heap.Remove(&k.queue, s.ka.idx)
	}
}

// close stops the keeper; sessions still registered are lost.
func (k *keeper) close() {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return
	}
	k.closed = true
	close(k.stop)
	lost := make([]*Session, 0, len(k.sessions))
	for s := range k.sessions {
		lost = append(lost, s)
	}
	clear(k.sessions)
	k.queue = nil
	k.mu.Unlock()
	k.wg.Wait()
	k.httpc.CloseIdleConnections()
	for _, s := range lost {
		s.lose(fmt.Errorf("%w: the client was closed", ErrLeaseLost))
	}
}

func (k *keeper) poke() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// scheduleLocked puts s on the heap at its next renewal (unless one is in
// flight) or its local deadline, whichever comes first.
func (k *keeper) scheduleLocked(s *Session, deadline time.Time) {
	at := deadline
	if !s.ka.inflight && s.ka.next.Before(at) {
		at = s.ka.next
	}
	s.ka.at = at
	if s.ka.idx >= 0 {
		heap.Fix(&k.queue, s.ka.idx)
		return
	}
	heap.Push(&k.queue, s)
}

// kaBatch is one renewal message in flight.
type kaBatch struct {
	sent     time.Time
	attempt  time.Duration // how long an answer may take
	sessions []*Session
}

// deadline is when b counts as unanswered: its attempt time after it was
// sent, or after the stream's last answer if that came later.
func (b kaBatch) deadline(lastAnswer time.Time) time.Time {
	if lastAnswer.After(b.sent) {
		return lastAnswer.Add(b.attempt)
	}
	return b.sent.Add(b.attempt)
}

// loop runs while the Client has sessions.
func (k *keeper) loop() {
	var (
		st         *kaStream
		ep         = k.c.current()
		inflight   []kaBatch
		lastAnswer time.Time // of the current stream
		failures   int       // consecutive stream failures
		pause      time.Time
		moveTo     = -1 // the leader's endpoint, named by a follower on the stream
		timer      = time.NewTimer(time.Hour)
	)
	defer timer.Stop()
	defer func() { st.close() }()
	// fail drops the stream and makes every renewal in flight due again on
	// the next endpoint; unanswered says the endpoint gave no answer (a
	// broken or refused connection, a batch not answered in time).
	fail := func(now time.Time, unanswered bool) {
		if unanswered {
			k.c.noteFailure(ep)
		}
		st.close()
		st, lastAnswer = nil, time.Time{}
		ep = (ep + 1) % len(k.c.eps)
		if moveTo >= 0 {
			ep, moveTo = moveTo, -1
		}
		failures++
		retry := now
		if failures%len(k.c.eps) == 0 { // every endpoint failed: wait a little
			pause = now.Add(min(time.Duration(failures/len(k.c.eps))*20*time.Millisecond, 200*time.Millisecond))
			retry = pause
		}
		k.mu.Lock()
		for _, b := range inflight {
			for _, s := range b.sessions {
				s.ka.inflight = false
				s.ka.next = retry
				if _, ok := k.sessions[s]; ok {
					k.scheduleLocked(s, s.Deadline())
				}
			}
		}
		k.mu.Unlock()
		inflight = nil
	}
	for {
		now := time.Now()
		due, lost, wakeAt, done := k.collect(now, now.Before(pause))
		for _, s := range lost {
			s.lose(fmt.Errorf("%w: no renewal confirmed before the local deadline", ErrLeaseLost))
		}
		if done {
			return
		}
		var msgs []*pb.KeepAliveStreamRequest
		for len(due) > 0 {
			n := min(len(due), maxKeepAliveBatch)
			b := kaBatch{sent: now, attempt: maxKeepAliveAttempt, sessions: due[:n]}
			ids := make([]string, n)
			for i, s := range b.sessions {
				ids[i] = s.id
				b.attempt = min(b.attempt, s.ttl/6)
			}
			due = due[n:]
			inflight = append(inflight, b)
			msgs = append(msgs, &pb.KeepAliveStreamRequest{LeaseIds: ids})
		}
		if len(msgs) > 0 && st == nil {
			st = k.c.openKeepAlive(ep)
		}
		for _, m := range msgs {
			if !st.send(m) {
				fail(now, true) // not draining: every renewal in flight, sent or not, is due again
				break
			}
		}
		if len(inflight) > 0 {
			wakeAt = minTime(wakeAt, inflight[0].deadline(lastAnswer))
		}
		timer.Reset(max(time.Until(wakeAt), 0))
		var results <-chan kaReply
		if st != nil {
			results = st.in
		}
		select {
		case <-k.stop:
			return
		case <-k.wake:
		case <-timer.C:
		case r := <-results:
			now := time.Now()
			if r.err != nil || len(inflight) == 0 {
				fail(now, r.err != nil && !api.IsServerError(r.err))
				continue
			}
			lastAnswer = now
			b := inflight[0]
			inflight = inflight[1:]
			if j := k.c.leaderEndpoint(r.msg.GetLeaderApiAddr()); j >= 0 && j != ep {
				moveTo = j
			}
			if !k.settle(now, b, r.msg) {
				fail(now, false) // a retryable refusal: the node cannot renew; try the next
				continue
			}
			failures = 0
			if moveTo >= 0 && len(inflight) == 0 {
				st.close()
				st, lastAnswer = nil, time.Time{}
				ep, moveTo = moveTo, -1
			}
		}
		if len(inflight) > 0 && !time.Now().Before(inflight[0].deadline(lastAnswer)) {
			fail(time.Now(), true)
		}
	}
}

// collect pops the sessions whose time came: those past their local
// deadline are lost, those due for renewal (unless paused) are marked in
// flight. It reports when the loop should look again, and done when the
// keeper has nothing left to renew (the loop then ends).
func (k *keeper) collect(now time.Time, paused bool) (due, lost []*Session, wakeAt time.Time, done bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed || len(k.sessions) == 0 {
		k.running = false
		return nil, nil, time.Time{}, true
	}
	// Renewals due within the coalescing window go now. When any does, it
	// takes with it every renewal due within a quarter of its session's
	// interval: renewed a little early, sessions created at different times
	// fall into step after one round and share messages from then on.
	soon := now.Add(keepAliveCoalesce)
	horizon := soon
	if !paused && len(k.queue) > 0 && !k.queue[0].ka.at.After(soon) {
		horizon = now.Add(max(keepAliveCoalesce, k.quarter))
	}
	var popped []*Session
	for len(k.queue) > 0 && !k.queue[0].ka.at.After(horizon) {
		s := heap.Pop(&k.queue).(*Session)
		deadline := s.Deadline()
		if !now.Before(deadline) {
			delete(k.sessions, s)
			lost = append(lost, s)
			continue
		}
		switch {
		case s.ka.inflight:
		case paused:
			if !soon.Before(s.ka.next) {
				s.ka.next = now.Add(keepAliveRetry)
			}
		case !now.Add(max(keepAliveCoalesce, s.opts.keepalive/4)).Before(s.ka.next):
			s.ka.inflight = true
			due = append(due, s)
		}
		popped = append(popped, s)
	}
	for _, s := range popped {
		k.scheduleLocked(s, s.Deadline())
	}
	wakeAt = now.Add(time.Hour)
	if len(k.queue) > 0 {
		wakeAt = k.queue[0].ka.at
		if floor := now.Add(time.Millisecond); wakeAt.Before(floor) {
			wakeAt = floor // a session about to be lost while its renewal is in flight
		}
	}
	return due, lost, wakeAt, false
}

// settle applies the answer to batch b. It reports false when a renewal
// was refused with a code that says this node cannot renew (not-leader,
// unavailable): the caller moves to another endpoint.
func (k *keeper) settle(now time.Time, b kaBatch, msg *pb.KeepAliveStreamResponse) bool {
	results := msg.GetResults()
	if len(results) != len(b.sessions) {
		results = nil // a malformed answer: every renewal is retried
	}
	ok := results != nil
	var expired []*Session
	k.mu.Lock()
	for i, s := range b.sessions {
		s.ka.inflight = false
		var code api.Code
		if results == nil || results[i].GetLeaseId() != s.id {
			code = api.CodeUnavailable
		} else {
			code = api.Code(results[i].GetErrorCode())
		}
		switch code {
		case "":
			if s.renewedAt(b.sent) {
				s.ka.next = b.sent.Add(s.opts.keepalive)
			}
		case api.CodeLeaseExpired:
			delete(k.sessions, s)
			if s.ka.idx >= 0 {
				heap.Remove(&k.queue, s.ka.idx)
			}
			expired = append(expired, s)
			continue
		case api.CodeNotLeader, api.CodeUnavailable:
			ok = false
			s.ka.next = now
		default: // outcome-unknown, resource-exhausted, ...: try again soon
			s.ka.next = now.Add(keepAliveRetry)
		}
		if _, live := k.sessions[s]; live {
			k.scheduleLocked(s, s.Deadline())
		}
	}
	k.mu.Unlock()
	for _, s := range expired {
		s.lose(fmt.Errorf("%w: %w", ErrLeaseLost, &api.Error{Code: api.CodeLeaseExpired, Message: "keepalive: the server expired the session"}))
	}
	return ok
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// kaStream is one KeepAliveStream to one endpoint, with a goroutine that
// sends (a stalled connection must not block the keeper) and one that
// receives. close cancels both and waits for them.
type kaStream struct {
	cancel context.CancelFunc
	bs     *connect.BidiStreamForClient[pb.KeepAliveStreamRequest, pb.KeepAliveStreamResponse]
	out    chan *pb.KeepAliveStreamRequest
	in     chan kaReply
	wg     sync.WaitGroup
}

type kaReply struct {
	msg *pb.KeepAliveStreamResponse
	err error
}

func (c *Client) openKeepAlive(ep int) *kaStream {
	ctx, cancel := context.WithCancel(context.Background())
	st := &kaStream{cancel: cancel, out: make(chan *pb.KeepAliveStreamRequest, maxQueuedMessages), in: make(chan kaReply, 16)}
	// Renewal answers are small and frequent: compressing them costs more
	// CPU than it saves on the wire, so this stream does not accept gzip.
	lc := leaseholdv1connect.NewLeaseholdServiceClient(c.keeper.httpc, c.eps[ep].base, connect.WithGRPC(), connect.WithAcceptCompression("gzip", nil, nil))
	bs := lc.KeepAliveStream(ctx)
	st.bs = bs
	report := func(r kaReply) {
		select {
		case st.in <- r:
		case <-ctx.Done():
		}
	}
	st.wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				_ = bs.CloseRequest()
				return
			case m := <-st.out:
				if err := bs.Send(m); err != nil {
					report(kaReply{err: fmt.Errorf("client: keepalive stream to %s: %w", c.eps[ep].addr, err)})
					return
				}
			}
		}
	})
	st.wg.Go(func() {
		defer func() { _ = bs.CloseResponse() }()
		for {
			m, err := bs.Receive()
			if err != nil {
				report(kaReply{err: fmt.Errorf("client: keepalive stream to %s: %w", c.eps[ep].addr, err)})
				return
			}
			report(kaReply{msg: m})
		}
	})
	return st
}

// send queues m; false when the stream is not keeping up.
func (st *kaStream) send(m *pb.KeepAliveStreamRequest) bool {
	select {
	case st.out <- m:
		return true
	default:
		return false
	}
}

func (st *kaStream) close() {
	if st == nil {
		return
	}
	st.cancel()
	// Cancelling the context does not wake a Receive while net/http is
	// still writing the request body (waiting for flow control from a busy
	// server); closing the response body resets the stream and does.
	_ = st.bs.CloseResponse()
	st.wg.Wait()
}

// kaHeap orders sessions by ka.at.
type kaHeap []*Session

func (h kaHeap) Len() int           { return len(h) }
func (h kaHeap) Less(i, j int) bool { return h[i].ka.at.Before(h[j].ka.at) }
func (h kaHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].ka.idx, h[j].ka.idx = i, j
}
func (h *kaHeap) Push(x any) {
	s := x.(*Session)
	s.ka.idx = len(*h)
	*h = append(*h, s)
}
func (h *kaHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	s.ka.idx = -1
	return s
}
