// Package lockstream serves the lock stream: Acquire, TryAcquire, Release
// and CancelWait, and the session operations CreateSession, KeepAlive and
// CloseSession, as messages on one long-lived bidirectional stream per
// client, each run through the server's unary handler of its procedure:
//
//	receive loop ─► id in flight? ─► a worker per request (Workers) ─► the unary handler
//	     ▲                                                        (Handler.Acquire, ...)
//	     └── cancel{id}: ends that request's context       answer {id, op | error} ─► send (one at a time)
//
// Requests run concurrently, so raft batches the commands of many into one
// fsync'd append; each is answered, out of order, once its command was
// committed, exactly as the unary RPC answers. Each message is one
// operation through the same functions as a unary RPC, which the server
// hands over as Hooks: the caller is authenticated again when the auth
// state changed since the last message (Hooks.Reauthenticate), the
// request rate is metered (Hooks.AllowOp), authorization is decided
// (Hooks.AuthorizeOp, Hooks.FinishOp), and the metrics and the access log
// count it under its unary procedure (Hooks.ObserveOp,
// httpedge.LogStreamOp).
//
// A node that does not lead forwards each message to the leader as its
// unary RPC (the handler does), so a client may keep its stream on any
// node; each such answer names the leader (leader_api_addr,
// Hooks.LeaderHint), so that a client whose stream stayed on a node that
// lost the lead learns where to go.
//
// An auth change applied on this node ends the stream with
// permission-denied when its caller can no longer authenticate or may lock
// nothing (Hooks.Revocable); a queued Acquire on it is decided again on
// its own name by the handler, so it leaves the queue when the caller may
// no longer lock that name.
//
// When the stream ends, by the client or a broken connection, every
// request in flight is cancelled as a unary call is when its caller goes
// away: a queued Acquire withdraws its wait, a grant made after the caller
// left is withdrawn. A grant whose answer was lost on the way is the
// client's to withdraw (CancelWait with the attempt's wait id), as after a
// lost unary reply. When the server shuts down (Config.Drain), requests
// received after that are refused as unavailable, queued Acquires end as
// unavailable, and the stream ends once every request in flight was
// answered.
//
// The package sees neither raft nor the state machine nor the server: it
// reaches them only through Handler and Hooks.
package lockstream

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/httpedge"
)

// MaxLockStreamInflight bounds the requests in flight on one LockStream;
// a request beyond it is refused with resource-exhausted.
const MaxLockStreamInflight = 10_000

// Handler is the unary handlers a stream's messages run through, those of
// leaseholdv1connect.LeaseholdServiceHandler. They are called from the
// workers, many at once; each answers as its unary RPC does (on a
// follower, by forwarding to the leader).
type Handler interface {
	Acquire(context.Context, *connect.Request[pb.AcquireRequest]) (*connect.Response[pb.AcquireResponse], error)
	TryAcquire(context.Context, *connect.Request[pb.TryAcquireRequest]) (*connect.Response[pb.TryAcquireResponse], error)
	Release(context.Context, *connect.Request[pb.ReleaseRequest]) (*connect.Response[pb.ReleaseResponse], error)
	CancelWait(context.Context, *connect.Request[pb.CancelWaitRequest]) (*connect.Response[pb.CancelWaitResponse], error)
	CreateSession(context.Context, *connect.Request[pb.CreateSessionRequest]) (*connect.Response[pb.CreateSessionResponse], error)
	KeepAlive(context.Context, *connect.Request[pb.KeepAliveRequest]) (*connect.Response[pb.KeepAliveResponse], error)
	CloseSession(context.Context, *connect.Request[pb.CloseSessionRequest]) (*connect.Response[pb.CloseSessionResponse], error)
}

// Hooks is what only the server knows: the caller's authentication and
// authorization, the rate limits, the metrics and the leader. The stream's
// loop calls Revocable, RevokedErr, AuthState and Reauthenticate; the
// others are called from the workers, many at once.
type Hooks interface {
	// Revocable returns a context that ends with a permission-denied
	// cause as soon as an auth change applied on this node leaves the
	// caller of ctx unable to use the lock stream, and stop, which ends
	// that watch and waits for it.
	Revocable(ctx context.Context) (_ context.Context, stop func())
	// RevokedErr is the error to end the stream with when ctx (of
	// Revocable) ended because the caller lost the stream, else nil.
	RevokedErr(ctx context.Context) error
	// AuthState is the auth state now; compared with ==, a change makes
	// the stream authenticate its caller again before its next request.
	AuthState() any
	// Reauthenticate authenticates the caller of ctx again from the
	// stream's headers and connection; the context returned carries the
	// principal, an error refuses every request until the next change.
	Reauthenticate(ctx context.Context) (context.Context, error)
	// AllowOp meters one operation of the caller of ctx against its
	// rate: nil, or the resource-exhausted refusal.
	AllowOp(ctx context.Context) error
	// AuthorizeOp decides one operation as the unary procedure proc
	// with request msg: the auth state FinishOp needs (opaque to the
	// stream), or the refusal.
	AuthorizeOp(ctx context.Context, proc string, msg any) (pol any, err error)
	// FinishOp ends an operation AuthorizeOp allowed: its answer res
	// (nil when it failed with err) is audited and redacted in place.
	FinishOp(ctx context.Context, pol any, proc string, res any, err error)
	// ObserveOp counts an operation of proc begun at start in the
	// metrics.
	ObserveOp(ctx context.Context, proc string, start time.Time, err error)
	// LeaderHint is the leader's API address when this node does not
	// lead and knows it, else "".
	LeaderHint() string
}

// Config is what Serve needs besides the stream.
type Config struct {
	Handler   Handler
	Hooks     Hooks
	Workers   *Workers        // run the requests
	Drain     <-chan struct{} // closed when the server shuts down
	AccessLog *slog.Logger    // nil: no access log lines
}

// lockStreamConn is the per-stream state the requests share.
type lockStreamConn struct {
	cfg    *Config
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

// Serve serves one LockStream until the client closes its side and every
// request in flight was answered, the stream breaks, the caller loses it
// (Hooks.Revocable), or the server drains (Config.Drain).
func Serve(ctx context.Context, stream *connect.BidiStream[pb.LockStreamRequest, pb.LockStreamResponse], cfg Config) error {
	c := &lockStreamConn{cfg: &cfg, stream: stream, peer: stream.Peer().Addr, proto: stream.Peer().Protocol}
	c.gate, _ = ctx.Value(flushGateKey{}).(*flushGate)
	stream.ResponseHeader().Set(api.StreamOpsHeader, api.StreamOpsSession+","+api.StreamOpsBatch)
	hooks := cfg.Hooks
	if addr := hooks.LeaderHint(); addr != "" {
		stream.ResponseHeader().Set(api.LeaderHeader, addr)
	}
	// A caller whose token is revoked, or who may lock nothing any more,
	// loses the stream at once: what is in flight ends (a queued Acquire
	// leaves its queue) with permission-denied, and so does the stream.
	ctx, stop := hooks.Revocable(ctx)
	defer stop()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	in := ReceiveAll(sctx, stream.Receive)
	var (
		inflight = map[uint64]context.CancelFunc{} // owned by this loop
		done     = make(chan uint64)
		wg       sync.WaitGroup
		// The caller as authenticated for the policies pol: again when
		// they change (a token revoked, a policy changed).
		pol     = hooks.AuthState()
		base    = ctx
		authErr error
		ended   error // why the stream ends once nothing is in flight
		ending  bool
		recv    = in
		drain   = cfg.Drain
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
		if now := hooks.AuthState(); now != pol {
			pol = now
			base, authErr = hooks.Reauthenticate(ctx)
		}
		rctx, stop := context.WithCancel(base)
		if ms := m.GetTimeoutMs(); ms > 0 {
			rctx, stop = context.WithTimeout(base, time.Duration(ms)*time.Millisecond)
		}
		inflight[id] = stop
		wg.Add(1)
		authErr := authErr // as it is now: the loop sets it again after a policy change
		cfg.Workers.Run(func() {
			defer wg.Done()
			resp := c.op(rctx, m, authErr)
			stop()
			resp.LeaderApiAddr = hooks.LeaderHint()
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
			if err := hooks.RevokedErr(ctx); err != nil {
				ended = err
			}
			return finish()
		case r := <-recv:
			if r.Err != nil {
				if !errors.Is(r.Err, io.EOF) {
					return finish() // broken: cancel what is in flight
				}
				// The client closed its side: answer what is in flight.
				recv, ending = nil, true
				continue
			}
			if len(r.Msg.GetBatch()) == 0 {
				if take(r.Msg) {
					return finish()
				}
				continue
			}
			if err := checkBatch(r.Msg); err != nil {
				ended = api.ToConnect(err)
				return finish()
			}
			for _, m := range r.Msg.GetBatch() {
				if take(m) {
					return finish()
				}
			}
		}
	}
}

// op runs one request as the operation of its unary procedure.
func (c *lockStreamConn) op(ctx context.Context, m *pb.LockStreamRequest, authErr error) *pb.LockStreamResponse {
	h := c.cfg.Handler
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
	hooks := c.cfg.Hooks
	start := time.Now()
	var logged *httpedge.Outcome
	if c.cfg.AccessLog != nil {
		ctx, logged = httpedge.WithOutcome(ctx)
	}
	var res *Res
	err := authErr
	if err == nil {
		err = hooks.AllowOp(ctx)
	}
	if err == nil {
		var pol any
		if pol, err = hooks.AuthorizeOp(ctx, proc, req); err == nil {
			var r *connect.Response[Res]
			if r, err = f(ctx, connect.NewRequest(req)); err == nil {
				res = r.Msg
				hooks.FinishOp(ctx, pol, proc, res, nil)
			} else {
				hooks.FinishOp(ctx, pol, proc, nil, err)
			}
		}
	}
	hooks.ObserveOp(ctx, proc, start, err)
	if logged != nil {
		httpedge.LogStreamOp(c.cfg.AccessLog, proc, leaseholdv1connect.LeaseholdServiceLockStreamProcedure, logged.Code(), time.Since(start), c.peer, c.proto)
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
