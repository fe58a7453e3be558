//go:build leasehold_sim

package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
	"github.com/leasehold/leasehold/internal/harness/linz"
	"github.com/leasehold/leasehold/internal/lessor"
)

// opTimeout bounds one attempt of a client call; an attempt that times out
// after it was proposed has an unknown outcome.
const opTimeout = time.Second

// client is one workload goroutine. It calls the nodes directly, as the
// server's handlers do: a request goes to a node that believes it leads
// (possibly a deposed leader that has not noticed yet) and is retried
// elsewhere only when it was certainly not applied.
type client struct {
	c     *Cluster
	id    int
	rng   *rand.Rand
	n     int // sessions created
	waits int // acquire requests (their WaitId)
	// sticky: keepalives go to the node that answered the last one for as
	// long as it believes it leads, as the Go client's keepalive stream
	// stays on its node until that node refuses or goes silent.
	sticky bool
	at     *node // the node of the last acknowledged keepalive (sticky)
}

// pick returns a node that believes it leads, waiting up to a few election
// timeouts for one.
func (cl *client) pick(ctx context.Context) *node {
	for {
		var leading []*node
		for _, n := range cl.c.nodes {
			if _, _, ok := n.leading(); ok {
				leading = append(leading, n)
			}
		}
		if len(leading) > 0 {
			return leading[cl.rng.IntN(len(leading))]
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// apply proposes cmd until it is applied, its outcome is unknown, or
// a bounded number of attempts met no leader.
func (cl *client) apply(cmd *fsmpb.Command) (fsm.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*opTimeout)
	defer cancel()
	for {
		n := cl.pick(ctx)
		if n == nil {
			return fsm.Result{}, errNotLeader
		}
		actx, acancel := context.WithTimeout(ctx, opTimeout)
		res, err := n.apply(actx, cmd)
		acancel()
		if !errors.Is(err, errNotLeader) {
			if err != nil && !errors.Is(err, errUnknown) {
				cl.c.violate("P11", "internal: %v", err)
			}
			return res, err
		}
		if ctx.Err() != nil {
			// Out of time: an attempt under an ended context is refused
			// at once as not applied, so without this the loop would
			// spin on it (virtual time creeping by retryPause) forever.
			return fsm.Result{}, errNotLeader
		}
		retryPause()
	}
}

// retryPause is what a client waits before it tries again after a node
// refused a request without applying it. A leader transferring its
// leadership refuses every proposal at once while it still leads; retried
// without a pause, such a refusal would keep the goroutine runnable and
// stop virtual time.
func retryPause() { time.Sleep(2 * time.Millisecond) }

// createSession returns a new session, or "" when none was created for
// certain. As the server's CreateSession does, the node renews the session
// in the request that created it: its TTL counts from that answer.
func (cl *client) createSession(ttl time.Duration) string {
	cl.n++
	lease := fmt.Sprintf("c%015x%016x", cl.id, cl.n) // 32 hex digits, as the server's lease ids
	sent := time.Now()
	cmd := &fsmpb.Command{UnixMs: sent.UnixMilli(), Op: &fsmpb.Command_CreateSession{CreateSession: &fsmpb.CreateSession{LeaseId: lease, TtlMs: ttl.Milliseconds(), Owner: lease}}}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		n := cl.pick(ctx)
		cancel()
		if n == nil {
			return ""
		}
		var renewed bool
		var term uint64
		actx, acancel := context.WithTimeout(context.Background(), opTimeout)
		res, err := n.applyThen(actx, cmd, func(l *lessor.Lessor) {
			_, rerr := l.RenewCommitted(lease)
			renewed, term = rerr == nil, n.promoted.Load()
		})
		acancel()
		if errors.Is(err, errNotLeader) {
			retryPause()
			continue
		}
		if err != nil || res.Err != nil {
			return ""
		}
		if renewed {
			cl.c.acked(lease, sent, ttl, term)
		}
		return lease
	}
}

// closeSession ends lease; its end is not an expiry (P7). Once the close
// is known applied, the lock operation queued (an index in the history, or
// -1) can no longer take effect.
func (cl *client) closeSession(lease string, queued int) {
	cl.c.mu.Lock()
	cl.c.closed[lease] = true
	cl.c.mu.Unlock()
	res, err := cl.apply(&fsmpb.Command{UnixMs: time.Now().UnixMilli(), Op: &fsmpb.Command_CloseSession{CloseSession: &fsmpb.CloseSession{LeaseId: lease}}})
	if queued >= 0 && err == nil && (res.Err == nil || errors.Is(res.Err, fsm.ErrSessionNotFound)) {
		cl.c.settledBy(queued)
	}
}

// keepalive renews lease; false means the grantor no longer knows it. As
// the Go client does, each attempt waits min(TTL/6, 1 s) for its answer, a
// confirmed renewal counts from the attempt's send time, and an attempt
// unanswered or refused moves the holder to another node (a sticky holder
// stays on the node of its last renewal until then; a pinned one stays on
// the node it is pinned to).
func (cl *client) keepalive(lease string, ttl time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 3*opTimeout)
	defer cancel()
	attempt := min(ttl/6, time.Second)
	for {
		n := cl.at
		if pin := cl.c.pinnedTo(); pin != nil && cl.sticky {
			n = pin
		} else if !cl.sticky || n == nil || !n.leads() {
			if n = cl.pick(ctx); n == nil {
				return true // no answer: the local deadline decides
			}
		}
		sent := time.Now()
		actx, acancel := context.WithTimeout(ctx, attempt)
		code, term, err := n.renew(actx, lease)
		acancel()
		switch {
		case err == nil && code == "":
			cl.c.acked(lease, sent, ttl, term)
			cl.at = n
			return true
		case err == nil && code == string(api.CodeLeaseExpired):
			return false
		}
		cl.at = nil
		if ctx.Err() != nil {
			return true // no answer: the local deadline decides
		}
		retryPause()
	}
}

func (cl *client) acquire(name, lease string) (uint64, string) {
	t, out, _ := cl.acquireOrWait(name, lease, true)
	return t, out
}

// acquireOrWait acquires name for lease; with try false it queues the
// session when name is held. A queued request is recorded with an unknown
// outcome: the grant may come at any later time. op is the request's index
// in the history (-1 when it was not recorded).
func (cl *client) acquireOrWait(name, lease string, try bool) (token uint64, out string, op int) {
	call := cl.c.now()
	in := linz.Input{Op: linz.OpAcquire, Name: name, Lease: lease}
	cl.waits++
	res, err := cl.apply(&fsmpb.Command{UnixMs: time.Now().UnixMilli(), Op: &fsmpb.Command_Acquire{Acquire: &fsmpb.Acquire{Name: name, LeaseId: lease, Try: try, WaitId: uint64(cl.waits)}}})
	o := linz.Output{}
	switch {
	case errors.Is(err, errNotLeader):
		return 0, "", -1 // never proposed
	case err != nil, res.Err == nil && res.Queued:
		o.Out = linz.OutUnknown
	case res.Err == nil && res.Holding != nil:
		o.Out, o.Token = linz.OutOK, res.Holding.GetToken()
	case errors.Is(res.Err, fsm.ErrLocked), errors.Is(res.Err, fsm.ErrLockDelay):
		o.Out = linz.OutLocked
	case errors.Is(res.Err, fsm.ErrSessionNotFound):
		o.Out = linz.OutExpired
	default:
		return 0, "", -1 // a limit: nothing changed
	}
	op = cl.c.record(false, cl.id, call, in, o)
	return o.Token, o.Out, op
}

func (cl *client) release(name, lease string, token uint64) string {
	call := cl.c.now()
	in := linz.Input{Op: linz.OpRelease, Name: name, Lease: lease, Token: token}
	out := cl.releaseUnrecorded(name, lease, token)
	if out != "" {
		cl.c.record(false, cl.id, call, in, linz.Output{Out: out})
	}
	return out
}

// releaseUnrecorded releases as release does, without recording the
// operation in the history; "" means it certainly changed nothing.
func (cl *client) releaseUnrecorded(name, lease string, token uint64) string {
	res, err := cl.apply(&fsmpb.Command{UnixMs: time.Now().UnixMilli(), Op: &fsmpb.Command_Release{Release: &fsmpb.Release{Name: name, LeaseId: lease, Token: token}}})
	switch {
	case errors.Is(err, errNotLeader):
		return ""
	case err != nil:
		return linz.OutUnknown
	case res.Err == nil:
		return linz.OutOK
	case errors.Is(res.Err, fsm.ErrNotHolder):
		return linz.OutNoHolder
	}
	return ""
}

// put writes the built-in fenced KV under key with token.
func (cl *client) put(key string, token uint64, value []byte) string {
	call := cl.c.now()
	in := linz.Input{Op: linz.OpPut, Name: key, Token: token}
	res, err := cl.apply(&fsmpb.Command{UnixMs: time.Now().UnixMilli(), Op: &fsmpb.Command_KvPut{KvPut: &fsmpb.KVPut{Key: key, Value: value, Token: token}}})
	out := linz.Output{}
	switch {
	case errors.Is(err, errNotLeader):
		return ""
	case err != nil:
		out.Out = linz.OutUnknown
	case res.Err == nil:
		out.Out = linz.OutOK
	case errors.Is(res.Err, fsm.ErrStaleToken):
		out.Out = linz.OutStale
	default:
		cl.c.violate("P4", "put(%s, %d) refused with %v", key, token, res.Err)
		return ""
	}
	cl.c.record(true, cl.id, call, in, out)
	return out.Out
}

// status reads name's holder through a linearizable read.
func (cl *client) status(name string) {
	call := cl.c.now()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	n := readTarget(ctx, cl)
	if n == nil {
		return
	}
	var out linz.Output
	if err := n.read(ctx, func(m *fsm.Machine) {
		out.Out = linz.OutOK
		if h := m.Lock(name).Holder; h != nil {
			out.Lease, out.Token = h.GetLeaseId(), h.GetToken()
		}
	}); err != nil {
		return
	}
	cl.c.record(false, cl.id, call, linz.Input{Op: linz.OpStatus, Name: name}, out)
}
