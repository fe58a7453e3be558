package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/httpedge"
)

// The lock stream
//
// LockStream carries Acquire, TryAcquire, Release and CancelWait, and the
// session operations CreateSession, KeepAlive and CloseSession, as
// messages on one long-lived bidirectional stream per client:
//
//	receive loop ─► id in flight? ─► a worker per request (workers.go) ─► the unary handler
//	     ▲                                                        (h.Acquire, ...)
//	     └── cancel{id}: ends that request's context       answer {id, op | error} ─► send (one at a time)
//
// Requests run concurrently, so raft batches the commands of many into one
// fsync'd append; each is answered, out of order, once its command was
// committed, exactly as the unary RPC answers. Each message is one
// operation through the same functions as a unary RPC: the caller is
// authenticated again when the auth state changed since the last message
// (reauthenticate), the request rate is metered (admission.Limiter.AllowOp),
// authorization is decided (authorizeOp, finishOp), and the metrics and the
// access log count it under its unary procedure (observeOp, httpedge.LogStreamOp).
//
// A node that does not lead forwards each message to the leader as its
// unary RPC (onLeader), so a client may keep its stream on any node; each
// such answer names the leader (leader_api_addr), so that a client whose
// stream stayed on a node that lost the lead learns where to go.
//
// An auth change applied on this node ends the stream with
// permission-denied when its caller can no longer authenticate or may lock
// nothing (revocable); a queued Acquire on it is decided again on its own
// name (acquire), so it leaves the queue when the caller may no longer
// lock that name.
//
// When the stream ends, by the client or a broken connection, every
// request in flight is cancelled as a unary call is when its caller goes
// away: a queued Acquire withdraws its wait, a grant made after the caller
// left is withdrawn. A grant whose answer was lost on the way is the
// client's to withdraw (CancelWait with the attempt's wait id), as after a
// lost unary reply. When the server shuts down, requests received after
// that are refused as unavailable, queued Acquires end as unavailable,
// and the stream ends once every request in flight was answered.

// MaxLockStreamInflight bounds the requests in flight on one LockStream;
// a request beyond it is refused with resource-exhausted.
const MaxLockStreamInflight = 10_000

// received is what one Receive of a bidirectional stream returned.
type received[T any] struct {
	msg *T
	err error
}

// receiveAll calls receive on a goroutine of its own (it blocks) and hands
// each message to the returned channel, until receive fails (that error is
// handed on too) or ctx ends. The goroutine ends when the stream does.
func receiveAll[T any](ctx context.Context, receive func() (*T, error)) <-chan received[T] {
	in := make(chan received[T])
	go func() {
		for {
			m, err := receive()
			select {
			case in <- received[T]{m, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return in
}

// lockStreamConn is the per-stream state the requests share.
type lockStreamConn struct {
	h      *lockService
	stream *connect.BidiStream[pb.LockStreamRequest, pb.LockStreamResponse]
	peer   string
	proto  string

	gate *flushGate // nil: every Send flushes on its own

	qmu     sync.Mutex // protects following
	queue   []*pb.LockStreamResponse
	sending bool // a caller of send is writing the queue
}

// send answers one request; a failure means the stream is broken (the
// receive loop learns it too). Answers that become ready while another
// is being written are written together by that writer and flushed once
// (one HTTP/2 frame and one trip through the connection's serve loop for
// many answers, instead of one each); send returns once resp is written
// or handed to the caller that is writing.
func (c *lockStreamConn) send(resp *pb.LockStreamResponse) {
	c.qmu.Lock()
	c.queue = append(c.queue, resp)
	if c.sending {
		c.qmu.Unlock()
		return
	}
	c.sending = true
	for len(c.queue) > 0 {
		batch := c.queue
		c.queue = nil
		c.qmu.Unlock()
		c.gate.hold()
		for _, m := range batch {
			_ = c.stream.Send(m)
		}
		c.gate.release()
		c.qmu.Lock()
	}
	c.sending = false
	c.qmu.Unlock()
}

// flushGate lets a LockStream write several answers before the response
// is flushed: while held, Flush only notes that one is due.
type flushGate struct {
	http.ResponseWriter

	mu   sync.Mutex // protects following
	held bool
	due  bool
}

type flushGateKey struct{}

// withFlushGate gives the LockStream handler a flushGate (through ctx).
func withFlushGate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != leaseholdv1connect.LeaseholdServiceLockStreamProcedure {
			next.ServeHTTP(w, r)
			return
		}
		g := &flushGate{ResponseWriter: w}
		next.ServeHTTP(g, r.WithContext(context.WithValue(r.Context(), flushGateKey{}, g)))
	})
}

func (g *flushGate) Flush() {
	if g == nil {
		return
	}
	g.mu.Lock()
	if g.held {
		g.due = true
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	if f, ok := g.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the writer underneath.
func (g *flushGate) Unwrap() http.ResponseWriter { return g.ResponseWriter }

func (g *flushGate) hold() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.held = true
	g.mu.Unlock()
}

// release ends a hold and flushes once if a Flush came during it.
func (g *flushGate) release() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.held = false
	due := g.due
	g.due = false
	g.mu.Unlock()
	if due {
		g.Flush()
	}
}

func (h *lockService) LockStream(ctx context.Context, stream *connect.BidiStream[pb.LockStreamRequest, pb.LockStreamResponse]) error {
	c := &lockStreamConn{h: h, stream: stream, peer: stream.Peer().Addr, proto: stream.Peer().Protocol}
	c.gate, _ = ctx.Value(flushGateKey{}).(*flushGate)
	stream.ResponseHeader().Set(api.StreamOpsHeader, api.StreamOpsSession+","+api.StreamOpsBatch)
	h.s.tellLeader(stream.ResponseHeader())
	// A caller whose token is revoked, or who may lock nothing any more,
	// loses the stream at once: what is in flight ends (a queued Acquire
	// leaves its queue) with permission-denied, and so does the stream.
	ctx, stop := h.s.revocable(ctx, leaseholdv1connect.LeaseholdServiceLockStreamProcedure, nil)
	defer stop()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	in := receiveAll(sctx, stream.Receive)
	var (
		inflight = map[uint64]context.CancelFunc{} // owned by this loop
		done     = make(chan uint64)
		wg       sync.WaitGroup
		// The caller as authenticated for the policies pol: again when
		// they change (a token revoked, a policy changed).
		pol     = h.s.policies()
		base    = ctx
		authErr error
		ended   error // why the stream ends once nothing is in flight
		ending  bool
		recv    = in
		drain   = h.s.drain
	)
	finish := func() error {
		for _, stop := range inflight {
			stop()
		}
		for len(inflight) > 0 {
			delete(inflight, <-done)
		}
		wg.Wait()
		return ended
	}
	// take starts request m (or refuses it alone); true when the stream
	// must end, ended saying why.
	take := func(m *pb.LockStreamRequest) bool {
		id := m.GetId()
		if cid, ok := m.GetOp().(*pb.LockStreamRequest_Cancel); ok {
			if stop := inflight[cid.Cancel]; stop != nil {
				stop()
			}
			return false
		}
		if inflight[id] != nil {
			// Its answer could not be told from the first one's.
			ended = api.ToConnect(api.Errorf(api.CodeInvalidArgument, "request id %d is already in flight on this stream", id))
			return true
		}
		var refusal error
		switch {
		case id == 0:
			refusal = api.Errorf(api.CodeInvalidArgument, "a lock stream request needs an id > 0")
		case m.GetTimeoutMs() < 0:
			refusal = api.Errorf(api.CodeInvalidArgument, "timeout_ms must be ≥ 0, got %d", m.GetTimeoutMs())
		case ending:
			refusal = api.Errorf(api.CodeUnavailable, "server shutting down")
		case len(inflight) >= MaxLockStreamInflight:
			refusal = api.Errorf(api.CodeResourceExhausted, "%d requests are in flight on this lock stream, the limit", len(inflight))
		}
		if refusal != nil {
			c.send(streamAnswer(id, nil, refusal))
			return false
		}
		if now := h.s.policies(); now != pol {
			pol = now
			base, authErr = h.s.reauthenticate(ctx, leaseholdv1connect.LeaseholdServiceLockStreamProcedure)
		}
		rctx, stop := context.WithCancel(base)
		if ms := m.GetTimeoutMs(); ms > 0 {
			rctx, stop = context.WithTimeout(base, time.Duration(ms)*time.Millisecond)
		}
		inflight[id] = stop
		wg.Add(1)
		authErr := authErr // as it is now: the loop sets it again after a policy change
		h.s.work.run(func() {
			defer wg.Done()
			resp := c.op(rctx, m, authErr)
			stop()
			resp.LeaderApiAddr = h.s.leaderHint()
			c.send(resp)
			done <- id
		})
		return false
	}
	for {
		if ending && len(inflight) == 0 {
			return finish()
		}
		select {
		case id := <-done:
			delete(inflight, id)
			continue
		case <-drain:
			// Answer what is in flight (queued Acquires end as unavailable),
			// refuse what comes next, then end.
			drain, ending = nil, true
			ended = api.ToConnect(api.Errorf(api.CodeUnavailable, "server shutting down"))
			continue
		case <-sctx.Done():
			if err := revokedErr(ctx); err != nil {
				ended = err
			}
			return finish()
		case r := <-recv:
			if r.err != nil {
				if !errors.Is(r.err, io.EOF) {
					return finish() // broken: cancel what is in flight
				}
				// The client closed its side: answer what is in flight.
				recv, ending = nil, true
				continue
			}
			if len(r.msg.GetBatch()) == 0 {
				if take(r.msg) {
					return finish()
				}
				continue
			}
			if err := checkBatch(r.msg); err != nil {
				ended = api.ToConnect(err)
				return finish()
			}
			for _, m := range r.msg.GetBatch() {
				if take(m) {
					return finish()
				}
			}
		}
	}
}

// op runs one request as the operation of its unary procedure.
func (c *lockStreamConn) op(ctx context.Context, m *pb.LockStreamRequest, authErr error) *pb.LockStreamResponse {
	h := c.h
	switch op := m.GetOp().(type) {
	case *pb.LockStreamRequest_Acquire:
		res, err := streamOp(ctx, c, authErr, leaseholdv1connect.LeaseholdServiceAcquireProcedure, op.Acquire, h.Acquire)
		return streamAnswer(m.GetId(), wrapIf(res, func(r *pb.AcquireResponse) any { return &pb.LockStreamResponse_Acquire{Acquire: r} }), err)
	case *pb.LockStreamRequest_TryAcquire:
		res, err := streamOp(ctx, c, authErr, leaseholdv1connect.LeaseholdServiceTryAcquireProcedure, op.TryAcquire, h.TryAcquire)
		return streamAnswer(m.GetId(), wrapIf(res, func(r *pb.TryAcquireResponse) any { return &pb.LockStreamResponse_TryAcquire{TryAcquire: r} }), err)
	case *pb.LockStreamRequest_Release:
		res, err := streamOp(ctx, c, authErr, leaseholdv1connect.LeaseholdServiceReleaseProcedure, op.Release, h.Release)
		return streamAnswer(m.GetId(), wrapIf(res, func(r *pb.ReleaseResponse) any { return &pb.LockStreamResponse_Release{Release: r} }), err)
	case *pb.LockStreamRequest_CancelWait:
		res, err := streamOp(ctx, c, authErr, leaseholdv1connect.LeaseholdServiceCancelWaitProcedure, op.CancelWait, h.CancelWait)
		return streamAnswer(m.GetId(), wrapIf(res, func(r *pb.CancelWaitResponse) any { return &pb.LockStreamResponse_CancelWait{CancelWait: r} }), err)
	case *pb.LockStreamRequest_CreateSession:
		res, err := streamOp(ctx, c, authErr, leaseholdv1connect.LeaseholdServiceCreateSessionProcedure, op.CreateSession, h.CreateSession)
		return streamAnswer(m.GetId(), wrapIf(res, func(r *pb.CreateSessionResponse) any { return &pb.LockStreamResponse_CreateSession{CreateSession: r} }), err)
	case *pb.LockStreamRequest_KeepAlive:
		res, err := streamOp(ctx, c, authErr, leaseholdv1connect.LeaseholdServiceKeepAliveProcedure, op.KeepAlive, h.KeepAlive)
		return streamAnswer(m.GetId(), wrapIf(res, func(r *pb.KeepAliveResponse) any { return &pb.LockStreamResponse_KeepAlive{KeepAlive: r} }), err)
	case *pb.LockStreamRequest_CloseSession:
		res, err := streamOp(ctx, c, authErr, leaseholdv1connect.LeaseholdServiceCloseSessionProcedure, op.CloseSession, h.CloseSession)
		return streamAnswer(m.GetId(), wrapIf(res, func(r *pb.CloseSessionResponse) any { return &pb.LockStreamResponse_CloseSession{CloseSession: r} }), err)
	}
	return streamAnswer(m.GetId(), nil, api.Errorf(api.CodeInvalidArgument,
		"a lock stream request needs one of acquire, try_acquire, release, cancel_wait, create_session, keep_alive, close_session"))
}

func wrapIf[Res any](res *Res, wrap func(*Res) any) any {
	if res == nil {
		return nil
	}
	return wrap(res)
}

// streamAnswer is the answer to request id: op (a LockStreamResponse_*
// value) or the refusal err.
func streamAnswer(id uint64, op any, err error) *pb.LockStreamResponse {
	out := &pb.LockStreamResponse{Id: id}
	if err != nil {
		e := api.FromError(err)
		out.Error = &pb.ErrorDetail{Code: string(e.Code), LastToken: e.LastToken, LeaderApiAddr: e.LeaderAddr}
		out.Message = e.Message
		return out
	}
	switch o := op.(type) {
	case *pb.LockStreamResponse_Acquire:
		out.Op = o
	case *pb.LockStreamResponse_TryAcquire:
		out.Op = o
	case *pb.LockStreamResponse_Release:
		out.Op = o
	case *pb.LockStreamResponse_CancelWait:
		out.Op = o
	case *pb.LockStreamResponse_CreateSession:
		out.Op = o
	case *pb.LockStreamResponse_KeepAlive:
		out.Op = o
	case *pb.LockStreamResponse_CloseSession:
		out.Op = o
	}
	return out
}

// streamOp runs req through handler f as one operation of proc: the same
// authentication result, rate, authorization, metrics and access log as
// the unary RPC proc.
func streamOp[Req, Res any](ctx context.Context, c *lockStreamConn, authErr error, proc string, req *Req,
	f func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
) (*Res, error) {
	s := c.h.s
	start := time.Now()
	var logged *httpedge.Outcome
	if s.cfg.AccessLog != nil {
		ctx, logged = httpedge.WithOutcome(ctx)
	}
	var res *Res
	err := authErr
	if err == nil {
		if e := s.lim.AllowOp(principal(ctx)); e != nil {
			err = e
		}
	}
	if err == nil {
		var pol *auth.Policies
		if pol, err = s.authorizeOp(ctx, proc, req); err == nil {
			var r *connect.Response[Res]
			if r, err = f(ctx, connect.NewRequest(req)); err == nil {
				res = r.Msg
				s.finishOp(ctx, pol, proc, res, nil)
			} else {
				s.finishOp(ctx, pol, proc, nil, err)
			}
		}
	}
	s.met.ObserveOp(ctx, proc, start, err)
	if logged != nil {
		httpedge.LogStreamOp(s.cfg.AccessLog, proc, leaseholdv1connect.LeaseholdServiceLockStreamProcedure, logged.Code(), time.Since(start), c.peer, c.proto)
	}
	return res, err
}

// checkBatch refuses a message with a batch that the stream cannot take
// (its answers could not all be told apart): the stream then ends with
// invalid-argument before any of its requests is taken.
func checkBatch(m *pb.LockStreamRequest) error {
	b := m.GetBatch()
	switch {
	case m.GetId() != 0 || m.GetTimeoutMs() != 0 || m.GetOp() != nil:
		return api.Errorf(api.CodeInvalidArgument, "a lock stream message with a batch has no id, timeout_ms or op of its own")
	case len(b) > api.StreamBatchMax:
		return api.Errorf(api.CodeInvalidArgument, "a lock stream batch carries at most %d requests, got %d", api.StreamBatchMax, len(b))
	}
	for _, r := range b {
		if len(r.GetBatch()) > 0 {
			return api.Errorf(api.CodeInvalidArgument, "a request of a lock stream batch has a batch of its own (request id %d)", r.GetId())
		}
	}
	return nil
}
