package client

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
)

// Lock operations of a Client
//
// Acquire, TryAcquire, Release and the withdrawal of an attempt
// (CancelWait), and the session operations (CreateSession, KeepAlive,
// CloseSession), travel as messages on one long-lived LockStream per
// endpoint, each with a request id, answered out of order:
//
//	call ─► lockSlot (one per endpoint) ─► lockStream: pending[id] ─► sender goroutine (sendLoop) ─► bs.Send
//	                                                       ▲
//	                                  receiver goroutine ──┘ answer {id} closes the request's done
//
// To call (client.go) a request on the stream is an attempt like a unary
// one, so failover, retries and the classification of failures stay as
// they are:
//   - an answer with an error is the server's refusal (ErrorDetail, as a
//     unary RPC's);
//   - a stream that breaks with the request written to it is a reply lost
//     in transit (outcome-unknown for a write; Acquire then withdraws its
//     wait id), unless the stream never connected (a dial error: not sent);
//   - a request not yet written when the stream broke was certainly not
//     sent: unavailable;
//   - a stream that a leasehold server ended with an error answered every
//     request it had received first, so the ones left were never read:
//     they get that error;
//   - the caller's deadline travels as timeout_ms; when the caller's
//     context ends first the request fails as a unary call cut off by its
//     context, and a cancel message ends it on the server (a queued
//     Acquire withdraws its wait).
//
// A server without LockStream (an older version) answers unimplemented
// before reading any request; the endpoint then uses the unary RPCs. A
// server whose stream does not list the session operations in its
// response header (api.StreamOpsHeader) refuses them, changing nothing;
// the endpoint then sends those as unary RPCs.
//
// Lock order: lockSlot.mu before lockStream.mu.

// maxQueuedLockRequests bounds the requests waiting for the sender of one
// stream; a caller beyond it waits (or its context ends).
const maxQueuedLockRequests = 4096

// lockSlot is the lock stream of one endpoint.
type lockSlot struct {
	c  *Client
	ep int

	wg sync.WaitGroup // every goroutine of every stream of the slot

	mu        sync.Mutex  // protects following
	st        *lockStream // the stream requests go to; nil until needed or after it broke
	unary     bool        // the endpoint has no LockStream: use the unary RPCs
	noSession bool        // its LockStream has no session operations: send them as unary RPCs
	closed    bool
}

// lockStream is one LockStream to one endpoint.
type lockStream struct {
	slot   *lockSlot
	cancel context.CancelFunc
	bs     *connect.BidiStreamForClient[pb.LockStreamRequest, pb.LockStreamResponse]
	out    chan *lockReq
	dead   chan struct{} // closed when the stream broke

	mu      sync.Mutex // protects following
	pending map[uint64]*lockReq
	next    uint64 // the last id used
	err     error  // why the stream broke; nil while it works
	heard   bool   // an answer came, so the response header is known
	session bool   // the header lists the session operations
	batch   bool   // the header lists batches
}

// lockReq is one request on a stream.
type lockReq struct {
	msg  *pb.LockStreamRequest
	sent bool          // handed to the stream (protected by lockStream.mu)
	done chan struct{} // closed when resp or err is set
	resp *pb.LockStreamResponse
	err  error
}

// stream returns the slot's working stream, opening one when there is
// none; false when requests of this kind (session operations or not) go
// as unary RPCs.
func (ls *lockSlot) stream(session bool) (*lockStream, bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.unary || ls.closed || session && ls.noSession {
		return nil, false
	}
	if ls.st != nil {
		ls.st.mu.Lock()
		broken := ls.st.err != nil
		ls.st.mu.Unlock()
		if !broken {
			return ls.st, true
		}
		// Its goroutines have ended or are ending (lockSlot.close waits
		// for them).
		ls.st.cancel()
	}
	ls.st = ls.open()
	return ls.st, true
}

func (ls *lockSlot) open() *lockStream {
	ctx, cancel := context.WithCancel(context.Background())
	st := &lockStream{slot: ls, cancel: cancel, out: make(chan *lockReq, maxQueuedLockRequests), dead: make(chan struct{}), pending: map[uint64]*lockReq{}}
	st.bs = ls.c.eps[ls.ep].locks.LockStream(ctx)
	ls.wg.Go(func() { st.sendLoop(ctx) })
	ls.wg.Go(func() {
		defer func() { _ = st.bs.CloseResponse() }()
		for {
			m, err := st.bs.Receive()
			if err != nil {
				st.fail(err)
				return
			}
			st.mu.Lock()
			first := !st.heard
			if first {
				st.heard = true
				ops := strings.Split(st.bs.ResponseHeader().Get(api.StreamOpsHeader), ",")
				st.session = slices.Contains(ops, api.StreamOpsSession)
				st.batch = slices.Contains(ops, api.StreamOpsBatch)
			}
			r := st.pending[m.GetId()]
			delete(st.pending, m.GetId())
			st.mu.Unlock()
			if first {
				ls.c.preferLeader(st.bs.ResponseHeader().Get(api.LeaderHeader))
			}
			// A node that lost the lead since the stream opened names the
			// new leader in each answer it forwarded.
			ls.c.preferLeader(m.GetLeaderApiAddr())
			if r != nil {
				r.resp = m
				close(r.done)
			}
		}
	})
	return st
}

// sendLoop writes the requests of st.out to the stream in order, until
// ctx ends or the stream breaks. To a server that takes batches
// (api.StreamOpsBatch) the requests queued behind the first go with it in
// one message, up to api.StreamBatchMax: one HTTP/2 frame, one write here
// and one read on the server for all of them. While other requests are in
// flight the sender first yields once, so that callers woken with it (by
// answers of one log write, say) queue theirs; a caller alone on the
// stream does not wait for that.
func (st *lockStream) sendLoop(ctx context.Context) {
	var (
		reqs []*lockReq
		msgs []*pb.LockStreamRequest
	)
	for {
		var r *lockReq
		select {
		case <-ctx.Done():
			_ = st.bs.CloseRequest()
			return
		case <-st.dead:
			return
		case r = <-st.out:
		}
		st.mu.Lock()
		batch, others := st.batch, len(st.pending) > 1
		st.mu.Unlock()
		reqs = append(reqs[:0], r)
		if batch {
			if others {
				runtime.Gosched()
			}
		queued:
			for len(reqs) < api.StreamBatchMax {
				select {
				case r := <-st.out:
					reqs = append(reqs, r)
				default:
					break queued
				}
			}
		}
		msgs = msgs[:0]
		st.mu.Lock()
		if st.err != nil {
			st.mu.Unlock()
			return
		}
		for _, r := range reqs {
			if r.msg.GetCancel() == 0 && st.pending[r.msg.GetId()] != r {
				continue // its caller gave up before it was sent
			}
			r.sent = true
			msgs = append(msgs, r.msg)
		}
		st.mu.Unlock()
		clear(reqs)
		var err error
		switch len(msgs) {
		case 0:
			continue
		case 1:
			err = st.bs.Send(msgs[0])
		default:
			err = st.bs.Send(&pb.LockStreamRequest{Batch: msgs})
		}
		clear(msgs)
		if err != nil {
			return // Receive reports why (Send says only io.EOF)
		}
	}
}

// fail breaks the stream with err and answers every request in flight.
func (st *lockStream) fail(err error) {
	st.mu.Lock()
	if st.err != nil {
		st.mu.Unlock()
		return
	}
	addr := st.slot.c.eps[st.slot.ep].addr
	st.err = fmt.Errorf("client: lock stream to %s: %w", addr, err)
	close(st.dead)
	pending := st.pending
	st.pending = nil
	st.mu.Unlock()
	var ce *connect.Error
	unimplemented := errors.As(err, &ce) && ce.Code() == connect.CodeUnimplemented && !api.IsServerError(err)
	if unimplemented {
		st.slot.mu.Lock()
		st.slot.unary = true
		st.slot.mu.Unlock()
	}
	for _, r := range pending {
		switch {
		case unimplemented:
			r.err = errUnimplemented
		case api.IsServerError(err):
			r.err = err // the server read no further: not applied
		case !r.sent:
			r.err = api.ToConnect(&api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf("lock stream to %s broke before the request was sent: %v", addr, api.FromError(err).Message)})
		case api.NotSent(err):
			r.err = st.err // it never connected
		default:
			// Sent, answer lost: for the caller a reply lost in transit.
			r.err = connect.NewError(connect.CodeUnavailable, st.err)
		}
		close(r.done)
	}
}

// errUnimplemented marks a request the endpoint cannot take on a stream;
// it is sent again as a unary RPC.
var errUnimplemented = errors.New("client: the server has no LockStream")

// close ends the slot's stream, failing what is in flight, and waits for
// the goroutines of every stream it had.
func (ls *lockSlot) close() {
	ls.mu.Lock()
	ls.closed = true
	st := ls.st
	ls.st = nil
	ls.mu.Unlock()
	if st != nil {
		st.cancel()
		_ = st.bs.CloseResponse() // wakes a Receive that waits behind flow control (keepalive.go)
	}
	ls.wg.Wait()
	if st != nil {
		st.fail(errors.New("the client was closed"))
	}
}

// do sends the request op on the slot's stream and waits for its answer,
// or for ctx. ok false: the endpoint takes no such request on its
// LockStream (or has none); use the unary RPC.
func (ls *lockSlot) do(ctx context.Context, op func(*pb.LockStreamRequest)) (resp *pb.LockStreamResponse, ok bool, err error) {
	r := &lockReq{msg: &pb.LockStreamRequest{}, done: make(chan struct{})}
	op(r.msg)
	session := sessionOp(r.msg)
	st, ok := ls.stream(session)
	if !ok {
		return nil, false, nil
	}
	if d, has := ctx.Deadline(); has {
		r.msg.TimeoutMs = max(time.Until(d).Milliseconds()+1, 1)
	}
	st.mu.Lock()
	if st.err != nil {
		err := st.err
		st.mu.Unlock()
		return nil, true, api.ToConnect(&api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf("not sent: %v", err)})
	}
	st.next++
	r.msg.Id = st.next
	st.pending[r.msg.Id] = r
	st.mu.Unlock()
	select {
	case st.out <- r:
	case <-r.done: // the stream broke first
	case <-ctx.Done():
		st.abandon(r)
		return nil, true, ctxError(ctx)
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		if st.abandon(r) {
			// Sent: end it on the server too (best effort; its timeout and
			// the caller's withdrawal cover a cancel that is not sent).
			select {
			case st.out <- &lockReq{msg: &pb.LockStreamRequest{Op: &pb.LockStreamRequest_Cancel{Cancel: r.msg.GetId()}}}:
			default:
			}
		}
		return nil, true, ctxError(ctx)
	}
	if errors.Is(r.err, errUnimplemented) {
		return nil, false, nil
	}
	if r.err != nil {
		return nil, true, r.err
	}
	if session && !st.sessionOps() {
		// An older server's refusal of an operation it does not know.
		ls.mu.Lock()
		ls.noSession = true
		ls.mu.Unlock()
		return nil, false, nil
	}
	if e := r.resp.GetError(); e != nil {
		return nil, true, api.ToConnect(&api.Error{Code: api.Code(e.GetCode()), Message: r.resp.GetMessage(), LastToken: e.GetLastToken(), LeaderAddr: e.GetLeaderApiAddr()})
	}
	return r.resp, true, nil
}

// sessionOps reports whether the stream's server takes the session
// operations; it is known once an answer came.
func (st *lockStream) sessionOps() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.session
}

// sessionOp reports whether m is a session operation (see api.StreamOpsSession).
func sessionOp(m *pb.LockStreamRequest) bool {
	switch m.GetOp().(type) {
	case *pb.LockStreamRequest_CreateSession, *pb.LockStreamRequest_KeepAlive, *pb.LockStreamRequest_CloseSession:
		return true
	}
	return false
}

// abandon drops r from the requests in flight after its caller gave up,
// and reports whether it was sent.
func (st *lockStream) abandon(r *lockReq) (sent bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.pending[r.msg.GetId()] == r {
		delete(st.pending, r.msg.GetId())
	}
	return r.sent
}

// streamed runs one lock operation on endpoint e's stream, or as the
// unary RPC unary when e has no LockStream: the f of call.
func streamed[Req, Res any](set func(*pb.LockStreamRequest, *Req), get func(*pb.LockStreamResponse) *Res,
	unary func(lsc, context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
) func(endpoint, context.Context, *connect.Request[Req]) (*connect.Response[Res], error) {
	return func(e endpoint, ctx context.Context, req *connect.Request[Req]) (*connect.Response[Res], error) {
		if e.ls != nil {
			resp, ok, err := e.ls.do(ctx, func(m *pb.LockStreamRequest) { set(m, req.Msg) })
			if err != nil {
				return nil, err
			}
			if ok {
				res := get(resp)
				if res == nil {
					return nil, connect.NewError(connect.CodeInternal, errors.New("client: a lock stream answer of the wrong kind"))
				}
				return connect.NewResponse(res), nil
			}
		}
		return unary(e.locks, ctx, req)
	}
}

func asEndpoint(e endpoint) endpoint { return e }

// The lock operations as call's f.
var (
	acquireOp = streamed(func(m *pb.LockStreamRequest, r *pb.AcquireRequest) { m.Op = &pb.LockStreamRequest_Acquire{Acquire: r} },
		(*pb.LockStreamResponse).GetAcquire, lsc.Acquire)
	tryAcquireOp = streamed(func(m *pb.LockStreamRequest, r *pb.TryAcquireRequest) {
		m.Op = &pb.LockStreamRequest_TryAcquire{TryAcquire: r}
	},
		(*pb.LockStreamResponse).GetTryAcquire, lsc.TryAcquire)
	releaseOp = streamed(func(m *pb.LockStreamRequest, r *pb.ReleaseRequest) { m.Op = &pb.LockStreamRequest_Release{Release: r} },
		(*pb.LockStreamResponse).GetRelease, lsc.Release)
	cancelWaitOp = streamed(func(m *pb.LockStreamRequest, r *pb.CancelWaitRequest) {
		m.Op = &pb.LockStreamRequest_CancelWait{CancelWait: r}
	},
		(*pb.LockStreamResponse).GetCancelWait, lsc.CancelWait)
	createSessionOp = streamed(func(m *pb.LockStreamRequest, r *pb.CreateSessionRequest) {
		m.Op = &pb.LockStreamRequest_CreateSession{CreateSession: r}
	},
		(*pb.LockStreamResponse).GetCreateSession, lsc.CreateSession)
	keepAliveOp = streamed(func(m *pb.LockStreamRequest, r *pb.KeepAliveRequest) {
		m.Op = &pb.LockStreamRequest_KeepAlive{KeepAlive: r}
	},
		(*pb.LockStreamResponse).GetKeepAlive, lsc.KeepAlive)
	closeSessionOp = streamed(func(m *pb.LockStreamRequest, r *pb.CloseSessionRequest) {
		m.Op = &pb.LockStreamRequest_CloseSession{CloseSession: r}
	},
		(*pb.LockStreamResponse).GetCloseSession, lsc.CloseSession)
)

// ctxError is the error of a request its caller's ctx ended, as connect
// reports a unary call cut off by its context.
func ctxError(ctx context.Context) error {
	code := connect.CodeDeadlineExceeded
	if errors.Is(ctx.Err(), context.Canceled) {
		code = connect.CodeCanceled
	}
	return connect.NewError(code, context.Cause(ctx))
}
