package raftnode

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Confirmed leadership
//
// A leader's local belief that it leads is not evidence: a process paused
// (VM freeze, GC or swap stall, SIGSTOP) and resumed still has raft's
// state set to Leader and answers what queued in its sockets before it
// notices that the others elected a successor. raft's VerifyLeader does not
// close that hole either: it counts the answer to any AppendEntries, and an
// answer to one sent before the pause completes a verification asked for
// after it.
//
// ConfirmLeadership asks for evidence gathered after it was called. The
// transport raft sends through is wrapped (ackTransport): every
// AppendEntries this node sends gets a sequence number before it is sent,
// and a successful answer in the sender's term records, per peer, the
// newest number answered. A confirmation round reads the counter when it
// starts (s0) and succeeds once a quorum of the latest configuration's
// voters — this node counting for itself — answered an AppendEntries
// numbered above s0 in the round's term, and this node still leads in that
// term. Why that is sound:
//
//  1. An AppendEntries numbered above s0 was sent after the round started,
//     so each such peer handled it after the round started.
//  2. A peer answers success only if its current term is at most the
//     request's (raft raises its own to it). raft persists a term before
//     it grants a vote in it, so that peer had not voted in any later term
//     when it answered.
//  3. A successor needs the votes of a quorum of a configuration that
//     overlaps ours (raft changes membership one server at a time), so at
//     least one of its voters answered us first: it was elected after the
//     round started, and so after every request the round covers arrived.
//
// A renewal confirmed this way is acknowledged before any successor exists,
// so the successor's lessor, which treats every session as renewed when it
// is promoted, never expires one earlier than the holder's own deadline
// (package lessor has the whole argument); a read index taken before the
// round covers every write any leader acknowledged before the read
// arrived. Neither depends on how long a process was paused, nor on clocks.
//
// Rounds are batched: one goroutine runs them back to back, and a caller
// that arrives while a round is in flight waits for the next one, which
// starts after it arrived; one round serves every caller of its batch. A
// round asks raft for immediate heartbeats (VerifyLeader, whose own answer
// is not used) and otherwise rides on the AppendEntries raft sends anyway.
// A node that is the only voter of its configuration confirms without a
// round: no other node can be elected without its vote.

// confirmRoundTimeout bounds one round: a leader that cannot hear a quorum
// for this long answers ErrUnavailable rather than keep its callers
// waiting (raft's own leader lease will have stepped it down by then).
const confirmRoundTimeout = 5 * time.Second

// confirmPoll is how often a waiting round looks whether this node still
// leads.
const confirmPoll = 20 * time.Millisecond

// ackTransport numbers the AppendEntries raft sends and records, per peer,
// the newest one answered with success in the request's term.
type ackTransport struct {
	raft.Transport
	sent atomic.Uint64 // the number of the last AppendEntries sent

	mu    sync.Mutex // protects following
	acks  map[raft.ServerID]peerAck
	wake  chan struct{} // cap 1: an AppendEntries was answered
	awake bool          // a round waits for wake
}

type peerAck struct {
	term, seq uint64
}

// preVoteTransport is an ackTransport over a transport that supports
// raft's pre-vote, which raft detects with a type assertion.
type preVoteTransport struct {
	*ackTransport
	pv raft.WithPreVote
}

func (t preVoteTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.pv.RequestPreVote(id, target, args, resp)
}

// wrapAcks returns the transport raft is given and the ackTransport in it.
func wrapAcks(inner raft.Transport) (raft.Transport, *ackTransport) {
	t := &ackTransport{Transport: inner, acks: map[raft.ServerID]peerAck{}, wake: make(chan struct{}, 1)}
	if pv, ok := inner.(raft.WithPreVote); ok {
		return preVoteTransport{t, pv}, t
	}
	return t, t
}

// AppendEntries numbers the request before sending it and records a
// successful answer.
func (t *ackTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	seq := t.sent.Add(1)
	err := t.Transport.AppendEntries(id, target, args, resp)
	ok := err == nil && resp.Success && resp.Term == args.Term
	t.mu.Lock()
	if ok && seq > t.acks[id].seq {
		t.acks[id] = peerAck{term: args.Term, seq: seq}
	}
	if t.awake {
		t.awake = false
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
	t.mu.Unlock()
	return err
}

// Close closes the inner transport when it can be closed (raft.WithClose).
func (t *ackTransport) Close() error {
	if c, ok := t.Transport.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}

// confirmed reports whether voters (the latest configuration's) make a
// quorum of answers numbered above s0 in term, self included.
func (t *ackTransport) confirmed(self raft.ServerID, conf raft.Configuration, term, s0 uint64) bool {
	voters, yes := 0, 0
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range conf.Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		if a := t.acks[s.ID]; s.ID == self || (a.term == term && a.seq > s0) {
			yes++
		}
	}
	return voters > 0 && yes > voters/2
}

// arm asks for a wake-up at the next answered AppendEntries.
func (t *ackTransport) arm() {
	t.mu.Lock()
	t.awake = true
	t.mu.Unlock()
}

// confirmer runs the confirmation rounds of a Node.
type confirmer struct {
	n     *Node
	acks  *ackTransport
	calls chan *confirmCall
}

type confirmCall struct {
	done chan error // cap 1
}

// ConfirmLeadership returns nil when this node led the cluster at some
// moment after the call began, with a quorum's evidence gathered after that
// moment (see the comment at the top of this file). Errors: ErrNotLeader
// (this node does not lead, or stopped leading during the round),
// ErrUnavailable (no quorum answered in time, or ctx ended), ErrShutdown.
func (n *Node) ConfirmLeadership(ctx context.Context) error {
	if err := n.leaderErr(); err != nil {
		return err
	}
	if n.soleVoter() {
		return nil
	}
	call := &confirmCall{done: make(chan error, 1)}
	select {
	case n.confirm.calls <- call:
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	case <-n.done:
		return ErrShutdown
	}
	select {
	case err := <-call.done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: leadership not confirmed: %w", ErrUnavailable, ctx.Err())
	case <-n.done:
		return ErrShutdown
	}
}

// soleVoter reports whether this node leads a configuration in which it is
// the only voter.
func (n *Node) soleVoter() bool {
	conf := n.raft.GetConfiguration().Configuration()
	voters, self := 0, false
	for _, s := range conf.Servers {
		if s.Suffrage == raft.Voter {
			voters++
			self = self || s.ID == raft.ServerID(n.cfg.NodeID)
		}
	}
	return voters == 1 && self && n.raft.State() == raft.Leader
}

// run serves rounds until the node closes: it takes every call waiting,
// runs one round for them, answers them all, and starts over.
func (c *confirmer) run(done <-chan struct{}) {
	var batch []*confirmCall
	for {
		select {
		case call := <-c.calls:
			batch = append(batch[:0], call)
		case <-done:
			return
		}
	more:
		for {
			select {
			case call := <-c.calls:
				batch = append(batch, call)
			default:
				break more
			}
		}
		err := c.round(done)
		for _, call := range batch {
			call.done <- err
		}
	}
}

// round runs one confirmation round; every call of the batch arrived
// before it starts.
func (c *confirmer) round(done <-chan struct{}) error {
	r := c.n.raft
	self := raft.ServerID(c.n.cfg.NodeID)
	term := r.CurrentTerm()
	s0 := c.acks.sent.Load()
	if err := c.n.leaderErr(); err != nil {
		return err
	}
	_ = r.VerifyLeader() // heartbeats now; its own answer is not used
	deadline := time.NewTimer(confirmRoundTimeout)
	defer deadline.Stop()
	// Leadership lost ends the round early; nothing wakes it for that but
	// the next answer, which may not come, so it also looks now and then.
	poll := time.NewTicker(confirmPoll)
	defer poll.Stop()
	for {
		c.acks.arm()
		if err := c.n.leaderErr(); err != nil || r.CurrentTerm() != term {
			return ErrNotLeader
		}
		if c.acks.confirmed(self, r.GetConfiguration().Configuration(), term, s0) {
			return nil
		}
		select {
		case <-c.acks.wake:
		case <-poll.C:
		case <-deadline.C:
			return fmt.Errorf("%w: no quorum confirmed this node's leadership within %v", ErrUnavailable, confirmRoundTimeout)
		case <-done:
			return ErrShutdown
		}
	}
}
