// Package client is the Go client of leasehold: sessions (leases) with a
// keepalive and a local safe deadline, locks with fencing tokens, the watch
// stream, the built-in fenced KV and cluster administration.
//
// A Session counts its lease from the moment it SENT each request that
// renewed it (create, acquire, keepalive) and considers it possibly lost at
//
//	sent + TTL·(1−drift) − margin
//
// unless a later renewal was confirmed first. At that moment Session.Done
// and every Lock.Done close, and Lock.Context is cancelled with cause
// ErrLeaseLost: stop the critical section. The grantor frees the lock no
// earlier than answered + TTL·(1+drift), so as long as clock rates differ by
// less than drift the holder stops first. Pauses (GC, VM freeze) can still
// let a write out late; pass Lock.Token to the resource so it can refuse it.
//
// Every call fails over between the endpoints given to Dial when a node is
// unreachable or cannot serve (codes unavailable and not-leader: the request
// was not applied). Calls that may have applied — leadership moved, or the
// connection broke after the request was sent — return ErrOutcomeUnknown
// instead of being retried, except where a retry is harmless (CreateSession,
// Acquire, TryAcquire, KeepAlive, CloseSession). A follower serves a call by
// forwarding it to the leader and names the leader in its answer; when the
// leader is one of the endpoints, the next calls go to it directly.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
)

// DefaultEndpoint is the address `leasehold serve` listens on by default.
const DefaultEndpoint = "127.0.0.1:7420"

// Client talks to a leasehold cluster. It is safe for concurrent use.
type Client struct {
	opts   dialOptions
	httpc  *http.Client
	eps    []endpoint
	keeper *keeper // renews every session over one stream

	mu     sync.Mutex  // protects following
	cur    int         // index of the endpoint calls go to first
	failed []time.Time // by endpoint: when a call or stream to it last failed
}

type endpoint struct {
	addr    string // as given to Dial
	base    string // its URL (dialOptions.baseURL): every call and stream to it uses this one
	locks   leaseholdv1connect.LeaseholdServiceClient
	cluster leaseholdv1connect.ClusterServiceClient
	ls      *lockSlot // the lock stream (lockstream.go); nil: unary RPCs only
}

type dialOptions struct {
	retryTimeout time.Duration
	tls          *tls.Config   // WithTLS (tls.go); nil: cleartext unless an endpoint says https://
	bearer       string        // WithBearerToken (auth.go)
	nodeSecret   string        // WithNodeSecret (auth.go)
	unaryLocks   bool          // WithUnaryLocks
	checkIdle    time.Duration // WithConnectionCheck
	checkTimeout time.Duration
}

// DialOption configures Dial.
type DialOption func(*dialOptions)

// WithRetryTimeout bounds how long a call keeps failing over between
// endpoints when none can serve it (default 10 s; the call's own context
// may end it sooner).
func WithRetryTimeout(d time.Duration) DialOption {
	return func(o *dialOptions) { o.retryTimeout = d }
}

// WithUnaryLocks sends the lock calls (Acquire, TryAcquire, Release and
// withdrawals) and the session calls (CreateSession, KeepAlive,
// CloseSession) as one unary RPC each instead of as messages on the
// Client's lock stream (one LockStream per endpoint, the default).
func WithUnaryLocks() DialOption {
	return func(o *dialOptions) { o.unaryLocks = true }
}

// WithConnectionCheck sets the health check of the client's connections:
// a connection that has received nothing for idle is sent an HTTP/2 ping,
// and one whose ping is not answered within timeout is closed. What was
// in flight on it fails as on any broken connection, so calls go to
// another endpoint instead of waiting for their contexts on a stalled one
// (a node partitioned away, dropping packets without closing the
// connection). Defaults 5 s and 5 s; idle 0 turns the check off, timeout
// 0 means 15 s.
func WithConnectionCheck(idle, timeout time.Duration) DialOption {
	return func(o *dialOptions) { o.checkIdle, o.checkTimeout = idle, timeout }
}

// Dial returns a Client for the comma-separated endpoints ("host:port",
// "http://host:port" or "https://host:port"; see WithTLS). It does not
// contact them: the first call does, and fails at once with ErrUnavailable
// ("no server at ADDR") when every endpoint refuses the connection.
func Dial(_ context.Context, endpoints string, opts ...DialOption) (*Client, error) {
	o := dialOptions{retryTimeout: 10 * time.Second, checkIdle: 5 * time.Second, checkTimeout: 5 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	c := &Client{opts: o, httpc: newHTTPClient(o)}
	c.keeper = newKeeper(c)
	for _, ep := range strings.Split(endpoints, ",") {
		ep = strings.TrimSpace(ep)
		if ep == "" {
			continue
		}
		base, err := o.baseURL(ep)
		if err != nil {
			return nil, err
		}
		e := endpoint{
			addr:    ep,
			base:    base,
			locks:   leaseholdv1connect.NewLeaseholdServiceClient(c.httpc, base, connect.WithGRPC()),
			cluster: leaseholdv1connect.NewClusterServiceClient(c.httpc, base, connect.WithGRPC()),
		}
		if !o.unaryLocks {
			e.ls = &lockSlot{c: c, ep: len(c.eps)}
		}
		c.eps = append(c.eps, e)
	}
	if len(c.eps) == 0 {
		return nil, &api.Error{Code: api.CodeInvalidArgument, Message: "no endpoints given"}
	}
	return c, nil
}

// Close stops the client's keepalive and lock streams and releases its
// connections. Sessions still open stop renewing and are lost at once
// (Done closes with ErrLeaseLost); close them first. Lock operations in
// flight end as after a lost connection. Close is idempotent.
func (c *Client) Close() error {
	c.keeper.close()
	for _, e := range c.eps {
		if e.ls != nil {
			e.ls.close()
		}
	}
	c.httpc.CloseIdleConnections()
	return nil
}

// current returns the index of the endpoint calls go to first.
func (c *Client) current() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// retryable reports whether a call that failed with code may be sent again
// without risk of applying twice: the request was not applied, or applying
// it twice has the effect of once (a session acquiring a name it already
// holds gets the same holding; closing a closed session is lease-expired;
// a session created twice leaves one unused session that expires by TTL;
// withdrawing a withdrawn wait changes nothing).
func retryable(code api.Code, req any) bool {
	switch code {
	case api.CodeUnavailable, api.CodeNotLeader:
		return true
	case api.CodeOutcomeUnknown:
		switch req.(type) {
		case *pb.CreateSessionRequest, *pb.AcquireRequest, *pb.TryAcquireRequest, *pb.KeepAliveRequest, *pb.CloseSessionRequest, *pb.CancelWaitRequest:
			return true
		}
	}
	return false
}

// isRead reports whether req changes nothing, so that a reply lost in
// transit only means "ask again".
func isRead(req any) bool {
	switch req.(type) {
	case *pb.StatusRequest, *pb.ListRequest, *pb.KvGetRequest, *pb.MembersRequest, *pb.WatchRequest:
		return true
	}
	return false
}

// lostInTransit reports whether err is a transport failure after the
// request may have reached a server: no server answered it (a leasehold
// server's errors carry an ErrorDetail), the call was not refused at
// connect time, and the caller's ctx is still live. connect reports such
// failures as unavailable, canceled (a reset), unknown, or internal ("incomplete
// envelope": the reply was cut off).
func lostInTransit(ctx context.Context, err error) bool {
	var ce *connect.Error
	if ctx.Err() != nil || !errors.As(err, &ce) || api.IsServerError(err) || api.NotSent(err) {
		return false
	}
	switch ce.Code() {
	case connect.CodeUnavailable, connect.CodeCanceled, connect.CodeUnknown, connect.CodeInternal, connect.CodeDataLoss:
		return true
	}
	return false
}

// classify turns the failure of one attempt of req into the error the
// caller sees.
func classify(ctx context.Context, err error, req any) *api.Error {
	e := api.FromError(err)
	switch {
	case api.IsServerError(err):
		return e
	case api.NotSent(err) && ctx.Err() != nil:
		return &api.Error{Code: ctxCode(ctx), Message: context.Cause(ctx).Error()}
	case api.NotSent(err):
		if errors.Is(err, http.ErrSchemeMismatch) {
			return &api.Error{Code: api.CodeUnavailable, Message: "the server speaks plain HTTP, not https: use http:// or host:port"}
		}
		return &api.Error{Code: api.CodeUnavailable, Message: e.Message}
	case lostInTransit(ctx, err) && isRead(req):
		return &api.Error{Code: api.CodeUnavailable, Message: "connection lost during the call: " + e.Message}
	case lostInTransit(ctx, err):
		return &api.Error{Code: api.CodeOutcomeUnknown, Message: "connection lost during the call, which may have applied: " + e.Message}
	case ctx.Err() != nil && !isRead(req) && !retryable(api.CodeOutcomeUnknown, req):
		// The caller's deadline or cancel cut a write off after it was sent:
		// it may have applied.
		return &api.Error{Code: api.CodeOutcomeUnknown, Message: fmt.Sprintf("%v before the answer; the write may have applied", ctxCode(ctx))}
	case ctx.Err() != nil:
		return &api.Error{Code: ctxCode(ctx), Message: context.Cause(ctx).Error()}
	}
	return e
}

// ctxCode is the code of ctx's end: canceled or deadline-exceeded.
func ctxCode(ctx context.Context) api.Code {
	if errors.Is(ctx.Err(), context.Canceled) {
		return api.CodeCanceled
	}
	return api.CodeDeadlineExceeded
}

// opError names the operation in e's message: one code, one message.
func opError(op string, e *api.Error) error {
	return &api.Error{Code: e.Code, Message: op + ": " + e.Message, LastToken: e.LastToken, LeaderAddr: e.LeaderAddr}
}

// call sends req through f, failing over between endpoints on retryable
// errors until one answers, ctx ends, or the retry timeout passes. When
// every endpoint refuses the connection on the first round, it fails at
// once: nothing is listening.
func call[Req, Res any, S any](ctx context.Context, c *Client, op string, pick func(endpoint) S,
	f func(S, context.Context, *connect.Request[Req]) (*connect.Response[Res], error), req *Req,
) (*Res, error) {
	stop := time.Now().Add(c.opts.retryTimeout)
	backoff := 10 * time.Millisecond
	refused := 0                    // endpoints that refused the connection, while all before them did too
	var refusal *api.Error          // the last `unavailable` or `not-leader` answer
	misconfigured := map[int]bool{} // endpoints this call cannot reach with its settings
	for attempt := 1; ; attempt++ {
		if ctx.Err() != nil { // not sent: certainly not applied
			return nil, opError(op, atDeadline(ctx, &api.Error{Code: ctxCode(ctx), Message: context.Cause(ctx).Error()}, refusal, req))
		}
		c.mu.Lock()
		i := c.cur
		c.mu.Unlock()
		resp, err := f(pick(c.eps[i]), ctx, connect.NewRequest(req))
		if err == nil {
			c.preferLeader(resp.Header().Get(api.LeaderHeader))
			return resp.Msg, nil
		}
		e := c.opts.dialHint(classify(ctx, err, req), err)
		// A refused connection or a misconfiguration (TLS, wrong port) on
		// every endpoint of the first round fails at once: retrying
		// cannot help, and nothing reached a server.
		hint := ""
		if r := refusedAtAccept(ctx, c.eps[i].addr, err); r != nil {
			e = r // a node at a connection limit: not a misconfiguration
		} else if hint = c.opts.misconfigured(ctx, c.eps[i].addr, err); hint != "" {
			e = &api.Error{Code: api.CodeUnavailable, Message: c.eps[i].addr + ": " + hint}
		}
		if refused == attempt-1 && (api.Refused(err) || errors.Is(err, http.ErrSchemeMismatch)) {
			if refused++; refused == len(c.eps) {
				if api.Refused(err) {
					e = &api.Error{Code: api.CodeUnavailable, Message: "no server at " + c.addrs()}
				}
				return nil, opError(op, e)
			}
		}
		if hint != "" {
			if misconfigured[i] = true; len(misconfigured) == len(c.eps) {
				return nil, opError(op, e)
			}
		}
		if e.Code == api.CodeUnavailable || e.Code == api.CodeNotLeader {
			refusal = e
		}
		if !retryable(e.Code, req) || ctx.Err() != nil || time.Now().After(stop) {
			return nil, opError(op, atDeadline(ctx, e, refusal, req))
		}
		if !c.failover(ctx, i, attempt, &backoff, err) { // ctx ended while waiting
			return nil, opError(op, atDeadline(ctx, e, refusal, req))
		}
	}
}

// atDeadline is the error of a call that ended with e: when e is the
// request's deadline running out (on the client or on the server, which
// gets the same deadline) after a server refused an attempt as unavailable
// (no leader, no quorum), it is that refusal, because it says why nothing
// was answered. Not where the deadline tells something itself: an
// Acquire's deadline is its wait running out, a cancel is the caller's own,
// and a write whose outcome is unknown and not harmless to repeat stays
// outcome-unknown. The attempt the deadline cut off may still have applied,
// which is harmless for the requests this covers (see retryable).
func atDeadline(ctx context.Context, e, refusal *api.Error, req any) *api.Error {
	_, hasDeadline := ctx.Deadline()
	_, acquire := req.(*pb.AcquireRequest)
	if refusal == nil || !hasDeadline || acquire || errors.Is(ctx.Err(), context.Canceled) {
		return e
	}
	if e.Code != api.CodeDeadlineExceeded && (e.Code != api.CodeOutcomeUnknown || !retryable(e.Code, req) || ctx.Err() == nil) {
		return e
	}
	return &api.Error{Code: refusal.Code, Message: refusal.Message + " (retried until the deadline)", LeaderAddr: refusal.LeaderAddr}
}

// failover moves calls off endpoint i after the attempt-th failed attempt,
// which failed with err, and, once every endpoint was tried, waits backoff
// (growing it). It reports false when ctx ended while waiting.
func (c *Client) failover(ctx context.Context, i, attempt int, backoff *time.Duration, err error) bool {
	if !api.IsServerError(err) {
		c.noteFailure(i) // not an answer: the endpoint may be unreachable
	}
	c.mu.Lock()
	if c.cur == i {
		c.cur = (i + 1) % len(c.eps)
	}
	c.mu.Unlock()
	if attempt%len(c.eps) == 0 { // every endpoint tried: wait a little
		select {
		case <-ctx.Done():
			return false
		case <-time.After(*backoff):
		}
		*backoff = min(2**backoff, 100*time.Millisecond) // an election takes ~1 s
	}
	return true
}

// preferLeader makes the endpoint a follower named as the leader
// (api.LeaderHeader) the one calls go to first, when it is one of c's
// endpoints and no call or stream to it went unanswered within
// leaderBackoff; the follower's hop is then spared. Failover moves on from
// it as from any endpoint.
func (c *Client) preferLeader(leader string) {
	if j := c.leaderEndpoint(leader); j >= 0 {
		c.mu.Lock()
		c.cur = j
		c.mu.Unlock()
	}
}

// leaderBackoff: an endpoint that a call or stream could not get an answer
// from (a refused or broken connection, no answer in time) is not taken as
// the leader on a follower's word for this long, so that a leader this
// client cannot reach is not tried again after every answer. A refusal the
// server answered (not-leader during an election) does not count.
const leaderBackoff = 30 * time.Second

// leaderEndpoint is the index of the endpoint at API address addr
// (host:port), or -1 when addr is empty, none is, or a call or stream to
// it got no answer within leaderBackoff.
func (c *Client) leaderEndpoint(addr string) int {
	if addr == "" {
		return -1
	}
	for j, e := range c.eps {
		if hostPort(e.addr) == addr {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.failed != nil && time.Since(c.failed[j]) < leaderBackoff {
				return -1
			}
			return j
		}
	}
	return -1
}

// noteFailure records that a call or stream to endpoint i got no answer.
func (c *Client) noteFailure(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed == nil {
		c.failed = make([]time.Time, len(c.eps))
	}
	c.failed[i] = time.Now()
}

// hostPort is endpoint ep without its scheme.
func hostPort(ep string) string {
	if _, rest, ok := strings.Cut(ep, "://"); ok {
		ep = rest
	}
	return strings.TrimSuffix(ep, "/")
}

func (c *Client) addrs() string {
	addrs := make([]string, len(c.eps))
	for i, ep := range c.eps {
		addrs[i] = ep.addr
	}
	return strings.Join(addrs, ", ")
}

func locks(e endpoint) leaseholdv1connect.LeaseholdServiceClient { return e.locks }
func cluster(e endpoint) leaseholdv1connect.ClusterServiceClient { return e.cluster }

type lsc = leaseholdv1connect.LeaseholdServiceClient
type csc = leaseholdv1connect.ClusterServiceClient

// Types shared with the wire protocol.
type (
	// Holding is one grant: (name, lease_id, token) plus display fields.
	Holding = pb.Holding
	// LockInfo describes a lock: holder, waiters, lock-delay.
	LockInfo = pb.LockInfo
	// Event is one lock event of a watch.
	Event = pb.Event
	// Member is one voter of the cluster.
	Member = pb.Member
)

// ReadOption configures Status, List and KVGet.
type ReadOption func(*readOptions)

type readOptions struct {
	stale bool
	limit int32
}

// Stale serves a read (Status, List, KVGet) from the contacted node's applied state without
// confirming leadership: faster, available without a quorum, possibly old.
func Stale() ReadOption { return func(o *readOptions) { o.stale = true } }

// ListLimit caps the number of locks List returns (the server caps at 1000).
func ListLimit(n int32) ReadOption { return func(o *readOptions) { o.limit = n } }

func readOpts(opts []ReadOption) readOptions {
	var o readOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// Status describes the lock name. Reads are linearizable unless Stale.
func (c *Client) Status(ctx context.Context, name string, opts ...ReadOption) (*LockInfo, error) {
	o := readOpts(opts)
	res, err := call(ctx, c, "status", locks, lsc.Status, &pb.StatusRequest{Name: name, Stale: o.stale})
	if err != nil {
		return nil, err
	}
	return res.GetLock(), nil
}

// List describes the held, queued or delayed locks whose name has prefix,
// and whether more matched than were returned.
func (c *Client) List(ctx context.Context, prefix string, opts ...ReadOption) ([]*LockInfo, bool, error) {
	o := readOpts(opts)
	res, err := call(ctx, c, "list", locks, lsc.List, &pb.ListRequest{Prefix: prefix, Stale: o.stale, Limit: o.limit})
	if err != nil {
		return nil, false, err
	}
	return res.GetLocks(), res.GetTruncated(), nil
}

// KVPut writes value under key in the built-in fenced KV iff token is not
// stale: token >= the key's last accepted token, or > when strict. A stale
// token fails with ErrStaleToken (see api.Error.LastToken); nothing changes.
func (c *Client) KVPut(ctx context.Context, key string, value []byte, token uint64, strict bool) error {
	_, err := call(ctx, c, "kv put", locks, lsc.KvPut, &pb.KvPutRequest{Key: key, Value: value, Token: token, Strict: strict})
	return err
}

// KVGet reads key from the fenced KV: its value and the token that wrote it.
// A missing key fails with ErrNotFound.
func (c *Client) KVGet(ctx context.Context, key string, opts ...ReadOption) ([]byte, uint64, error) {
	o := readOpts(opts)
	res, err := call(ctx, c, "kv get", locks, lsc.KvGet, &pb.KvGetRequest{Key: key, Stale: o.stale})
	if err != nil {
		return nil, 0, err
	}
	return res.GetValue(), res.GetToken(), nil
}

// Release ends the holding (name, leaseID, token) without a Session, as the
// CLI does. A handle that is not the current holding fails with
// ErrNotHolder and changes nothing. A release whose outcome is unknown (a
// leader change, a reply cut off) is sent once more: if the holding is gone
// by then (ErrNotHolder, ErrLeaseExpired: tokens are never reused, so it
// cannot be held again) it is released either way and Release returns nil.
func (c *Client) Release(ctx context.Context, name, leaseID string, token uint64) error {
	req := &pb.ReleaseRequest{Name: name, LeaseId: leaseID, Token: token}
	_, err := call(ctx, c, "release", asEndpoint, releaseOp, req)
	if !errors.Is(err, ErrOutcomeUnknown) || ctx.Err() != nil {
		return err
	}
	_, again := call(ctx, c, "release", asEndpoint, releaseOp, req)
	switch {
	case again == nil, errors.Is(again, ErrNotHolder), errors.Is(again, ErrLeaseExpired):
		return nil
	case ctx.Err() != nil:
		return err // the second attempt could not be made: still unknown
	}
	return again
}

// Members lists the voters of the cluster as the contacted node sees them.
func (c *Client) Members(ctx context.Context) ([]*Member, string, error) {
	res, err := call(ctx, c, "members", cluster, csc.Members, &pb.MembersRequest{})
	if err != nil {
		return nil, "", err
	}
	return res.GetMembers(), res.GetLeaderId(), nil
}

// AddMember adds a member with its raft and API addresses as a non-voter;
// the leader promotes it to voter once it has caught up.
func (c *Client) AddMember(ctx context.Context, id, raftAddr, apiAddr string) ([]*Member, error) {
	res, err := call(ctx, c, "add member", cluster, csc.AddMember, &pb.AddMemberRequest{Id: id, RaftAddr: raftAddr, ApiAddr: apiAddr})
	if err != nil {
		return nil, err
	}
	return res.GetMembers(), nil
}

// RemoveMember removes a member; the leader refuses (invalid-argument) when
// the voters left would not include a quorum of reachable members.
func (c *Client) RemoveMember(ctx context.Context, id string) ([]*Member, error) {
	res, err := call(ctx, c, "remove member", cluster, csc.RemoveMember, &pb.RemoveMemberRequest{Id: id})
	if err != nil {
		return nil, err
	}
	return res.GetMembers(), nil
}

// BumpToken raises the cluster's token counter to at least min (after a
// restore from backup) and returns the newest token issued; the next grant
// gets a larger one. It never lowers the counter.
func (c *Client) BumpToken(ctx context.Context, min uint64) (uint64, error) {
	res, err := call(ctx, c, "bump token", cluster, csc.BumpToken, &pb.BumpTokenRequest{MinToken: min})
	if err != nil {
		return 0, err
	}
	return res.GetToken(), nil
}

// TransferLeader hands leadership to voter id (any voter when empty) and
// returns the new leader's id.
func (c *Client) TransferLeader(ctx context.Context, id string) (string, error) {
	res, err := call(ctx, c, "transfer leader", cluster, csc.TransferLeader, &pb.TransferLeaderRequest{Id: id})
	if err != nil {
		return "", err
	}
	return res.GetLeaderId(), nil
}

// KVDelete removes key's value from the built-in fenced KV iff token is not
// stale, by the rule of KVPut. The key keeps its fence as a token-only
// tombstone: a later write with an older token fails with ErrStaleToken.
// A key never written fails with ErrNotFound.
func (c *Client) KVDelete(ctx context.Context, key string, token uint64, strict bool) error {
	_, err := call(ctx, c, "client: kv delete", locks, lsc.KvDelete, &pb.KvDeleteRequest{Key: key, Token: token, Strict: strict})
	return err
}
