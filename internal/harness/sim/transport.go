//go:build leasehold_sim

package sim

import (
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// minLatency is the least time an RPC takes.
const minLatency = 200 * time.Microsecond

// errCut is what an RPC over a cut or dropping link returns.
var errCut = errors.New("sim: link cut")

// network is the fault table every faultTransport consults. Faults are
// directional: cut[a][b] drops every RPC a sends to b (its requests; a
// reply travels on the request's call, and deaf[a] loses the replies to
// a's). A link's delay holds each RPC for
// a random time up to delay, so concurrent RPCs (heartbeats, appends,
// votes) arrive reordered.
type network struct {
	mu    sync.Mutex // protects following
	cut   map[[2]string]bool
	delay map[[2]string]time.Duration
	drop  map[[2]string]float64
	// deaf[a]: every reply to an RPC a sends is lost after the target
	// handled it, as when every packet into a is dropped.
	deaf map[string]bool
	// onTimeoutNow[a] runs once, when a's next TimeoutNow (a leadership
	// transfer) has passed the table, before it is delivered.
	onTimeoutNow map[string]func(n *network)
	rng          *rand.Rand
	rpcs         int // RPCs refused by a fault
	// pauses is every node's pause, by id; set before any RPC, read
	// without the lock.
	pauses map[string]*pause
}

func newNetwork(seed uint64) *network {
	return &network{cut: map[[2]string]bool{}, delay: map[[2]string]time.Duration{}, drop: map[[2]string]float64{}, deaf: map[string]bool{}, onTimeoutNow: map[string]func(*network){}, rng: rand.New(rand.NewPCG(seed, 0x5eed))}
}

// verdict decides the fate of one RPC from → to: how long it is held,
// whether it is refused, and whether its reply is lost after the target
// handled it (a dropped RPC loses its request or its reply, equally often).
func (n *network) verdict(from, to string) (d time.Duration, deliver, replyLost bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := [2]string{from, to}
	if n.cut[k] {
		n.rpcs++
		return 0, false, false
	}
	if n.drop[k] > 0 && n.rng.Float64() < n.drop[k] {
		n.rpcs++
		if n.rng.IntN(2) == 0 {
			return 0, false, false
		}
		replyLost = true
	}
	if max := n.delay[k]; max > 0 {
		d = time.Duration(n.rng.Int64N(int64(max)))
	}
	if n.deaf[from] && !replyLost {
		n.rpcs++
		replyLost = true
	}
	return d, true, replyLost
}

// heal removes every fault.
func (n *network) heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cut)
	clear(n.delay)
	clear(n.drop)
	clear(n.deaf)
	clear(n.onTimeoutNow)
}

func (n *network) set(f func(n *network)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f(n)
}

// faultTransport is raft's in-memory transport behind the network's fault
// table. Pipelining is off, so every append passes the table.
type faultTransport struct {
	*raft.InmemTransport
	id   string
	net  *network
	addr func(raft.ServerAddress) string // raft address → node id
}

var _ raft.WithClose = (*faultTransport)(nil)

// call sends one RPC through the fault table: rpc is the inner
// transport's call.
func (t *faultTransport) call(target raft.ServerAddress, rpc func() error) error {
	return t.callThen(target, nil, rpc)
}

// callThen is call, running passed (when not nil) once the RPC has passed
// the fault table and before it is delivered.
//
// A paused sender sends nothing until it resumes, and reads the answer to
// an RPC it sent before its pause only after it; an RPC to a paused
// target waits for the target to resume, as a request queued in its socket.
func (t *faultTransport) callThen(target raft.ServerAddress, passed func(), rpc func() error) error {
	from, to := t.net.pauses[t.id], t.net.pauses[t.addr(target)]
	from.wait()
	d, deliver, replyLost := t.net.verdict(t.id, t.addr(target))
	if !deliver {
		return errCut
	}
	if passed != nil {
		passed()
	}
	// Every RPC takes at least minLatency, as on a network: raft retry loops
	// without a backoff (a follower refusing appends, a snapshot sent again)
	// then let virtual time advance instead of stopping it.
	time.Sleep(max(d, minLatency))
	to.wait()
	err := rpc()
	from.wait()
	if err != nil || !replyLost {
		return err
	}
	return errCut
}

// AppendEntriesPipeline is not supported: raft falls back to AppendEntries.
func (t *faultTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// AppendEntries sends through the fault table.
func (t *faultTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return t.call(target, func() error { return t.InmemTransport.AppendEntries(id, target, args, resp) })
}

// RequestVote sends through the fault table.
func (t *faultTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return t.call(target, func() error { return t.InmemTransport.RequestVote(id, target, args, resp) })
}

// RequestPreVote sends through the fault table.
func (t *faultTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.call(target, func() error { return t.InmemTransport.RequestPreVote(id, target, args, resp) })
}

// InstallSnapshot sends through the fault table.
func (t *faultTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	return t.call(target, func() error { return t.InmemTransport.InstallSnapshot(id, target, args, resp, data) })
}

// TimeoutNow sends through the fault table; once it passed, the sender's
// onTimeoutNow hook (if any) runs, so a fault can strike exactly between a
// leadership transfer's TimeoutNow and the target's campaign.
func (t *faultTransport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	passed := func() {
		t.net.set(func(n *network) {
			if f := n.onTimeoutNow[t.id]; f != nil {
				delete(n.onTimeoutNow, t.id)
				f(n)
			}
		})
	}
	return t.callThen(target, passed, func() error { return t.InmemTransport.TimeoutNow(id, target, args, resp) })
}
