package raftnode

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/internal/fsm"
)

// freezer stops one node's traffic as a paused process would: every RPC to
// it waits (it is queued in its sockets), its own RPCs wait before they are
// sent, and the answer to the one it was waiting for when it froze (one per
// peer) is held and read only after it resumes.
type freezer struct {
	mu      sync.Mutex // protects following
	frozen  raft.ServerAddress
	resumed chan struct{} // closed by resume
	sent    map[raft.ServerAddress]bool
}

func (f *freezer) freeze(addr raft.ServerAddress) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.frozen, f.resumed, f.sent = addr, make(chan struct{}), map[raft.ServerAddress]bool{}
}

func (f *freezer) resume() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.resumed)
	f.frozen = ""
}

// pausableTransport is one node's transport under a freezer. Pipelining is
// off, so every append goes through AppendEntries.
type pausableTransport struct {
	*raft.InmemTransport
	f *freezer
}

func (t *pausableTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// gate decides how a call to target waits: before it is sent (wait) and,
// for the frozen node's first call to each peer, after its answer came
// (hold). Both channels are nil when the call goes through.
func (t *pausableTransport) gate(target raft.ServerAddress) (wait, hold <-chan struct{}) {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	switch {
	case t.f.frozen == "":
		return nil, nil
	case target == t.f.frozen:
		return t.f.resumed, nil
	case t.LocalAddr() == t.f.frozen && !t.f.sent[target]:
		t.f.sent[target] = true
		return nil, t.f.resumed
	case t.LocalAddr() == t.f.frozen:
		return t.f.resumed, nil
	}
	return nil, nil
}

func (t *pausableTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	wait, hold := t.gate(target)
	if wait != nil {
		<-wait
	}
	err := t.InmemTransport.AppendEntries(id, target, args, resp)
	if hold != nil {
		<-hold
	}
	return err
}

func (t *pausableTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if wait, _ := t.gate(target); wait != nil {
		<-wait
	}
	return t.InmemTransport.RequestVote(id, target, args, resp)
}

func (t *pausableTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if wait, _ := t.gate(target); wait != nil {
		<-wait
	}
	return t.InmemTransport.RequestPreVote(id, target, args, resp)
}

// TestResumedLeaderConfirmsNothing freezes the leader while a successor is
// elected and acknowledges a write, then queues a read and a confirmation
// at the frozen leader and resumes it, delivering first the answers its
// followers gave before the election. The resumed leader must neither
// confirm its leadership (which a renewal waits for) nor serve the read
// from its old state. raft's own VerifyLeader counts those old answers.
//
// The frozen node's leader lease (raft steps a leader down that heard no
// quorum for LeaderLeaseTimeout) is longer than the followers' election,
// as the whole process, lease timer included, would be stopped by a pause.
func TestResumedLeaderConfirmsNothing(t *testing.T) {
	f := &freezer{}
	c := newCluster(t, 3, func(i int, cfg *Config) {
		tr := cfg.Transport.(*raft.InmemTransport)
		cfg.Transport = &pausableTransport{InmemTransport: tr, f: f}
		if i == 0 {
			cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 5*time.Second, 5*time.Second, 5*time.Second
		} else {
			cfg.HeartbeatTimeout, cfg.ElectionTimeout = 1500*time.Millisecond, 1500*time.Millisecond
		}
	})
	old, addr := c.nodes[0], c.trans[0].LocalAddr()
	first := waitLeader(t, c.nodes...)
	if first != old {
		if err := first.Raft().LeadershipTransferToServer(raft.ServerID(old.ID()), addr).Error(); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "n1 leads", func() bool { return old.IsLeader() && old.barrierTerm.Load() == old.Raft().CurrentTerm() })
	mustApply(t, old, create("s", 60_000))
	tok := mustApply(t, old, acquire("k", "s", 0)).Holding.GetToken()
	mustApply(t, old, kvPut("k", "v1", tok))
	if err := old.ConfirmLeadership(ctxT(t)); err != nil {
		t.Fatalf("a leader that hears its followers: ConfirmLeadership = %v", err)
	}

	f.freeze(addr)
	var successor *Node
	eventually(t, "a successor", func() bool {
		for _, n := range c.nodes[1:] {
			if n.IsLeader() && n.barrierTerm.Load() == n.Raft().CurrentTerm() {
				successor = n
				return true
			}
		}
		return false
	})
	mustApply(t, successor, kvPut("k", "v2", tok))
	if !old.IsLeader() {
		t.Fatal("the frozen leader stepped down before it resumed: the freeze is not a pause")
	}

	// Requests queued at the frozen process: they run when it resumes.
	type answer struct {
		what  string
		err   error
		value string
	}
	answers := make(chan answer, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	go func() {
		err := old.ReadIndex(ctx)
		a := answer{what: "read", err: err}
		if err == nil {
			old.Read(func(m *fsm.Machine) { a.value = string(m.KV("k").GetValue()) })
		}
		answers <- a
	}()
	go func() { answers <- answer{what: "confirm", err: old.ConfirmLeadership(ctx)} }()
	time.Sleep(50 * time.Millisecond) // let both reach the node before it resumes
	f.resume()

	for range 2 {
		a := <-answers
		switch {
		case a.err == nil && a.what == "read":
			t.Errorf("the resumed leader served a read: %q (the successor acknowledged v2)", a.value)
		case a.err == nil:
			t.Errorf("the resumed leader confirmed its leadership after a successor was elected")
		case !errors.Is(a.err, ErrNotLeader) && !errors.Is(a.err, ErrUnavailable):
			t.Errorf("%s on the resumed leader: %v, want ErrNotLeader or ErrUnavailable", a.what, a.err)
		default:
			t.Logf("%s on the resumed leader: %v", a.what, a.err)
		}
	}
	if err := successor.ReadIndex(ctxT(t)); err != nil {
		t.Fatalf("the successor's read: %v", err)
	}
	var got string
	successor.Read(func(m *fsm.Machine) { got = string(m.KV("k").GetValue()) })
	if got != "v2" {
		t.Fatalf("the successor reads %q, want v2", got)
	}
}

// TestConfirmLeadershipBatches: concurrent confirmations share rounds, and
// each answers nil on a leader whose followers answer (a round that finds
// no quorum in time on a loaded machine is unavailable: retried, as
// clients do).
func TestConfirmLeadershipBatches(t *testing.T) {
	c := newCluster(t, 3)
	leader := waitLeader(t, c.nodes...)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Go(func() {
			ctx := ctxT(t)
			err := leader.ConfirmLeadership(ctx)
			for errors.Is(err, ErrUnavailable) && ctx.Err() == nil {
				err = leader.ConfirmLeadership(ctx)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("ConfirmLeadership on a healthy leader: %v", err)
		}
	}
	for _, n := range c.nodes {
		if n != leader {
			if err := n.ConfirmLeadership(ctxT(t)); !errors.Is(err, ErrNotLeader) {
				t.Fatalf("ConfirmLeadership on follower %s: %v, want ErrNotLeader", n.ID(), err)
			}
		}
	}
}

// TestSoleVoterConfirmsAlone: a single-node cluster confirms without a
// round (nobody else can be elected without its vote).
func TestSoleVoterConfirmsAlone(t *testing.T) {
	n := open(t, testConfig(t, t.TempDir()))
	eventually(t, "leader", n.IsLeader)
	for i := range 3 {
		if err := n.ConfirmLeadership(ctxT(t)); err != nil {
			t.Fatal(fmt.Sprint("round ", i, ": ", err))
		}
	}
}
