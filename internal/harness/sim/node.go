//go:build leasehold_sim

package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	leaseholdv1 "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
	"github.com/leasehold/leasehold/internal/lessor"
	"github.com/leasehold/leasehold/internal/raftnode"
	"github.com/leasehold/leasehold/internal/server"
)

// Errors of a node's operations, as a client sees them.
var (
	// errNotLeader: the node is not the leader; nothing was applied.
	errNotLeader = errors.New("sim: not the leader")
	// errUnknown: the command may or may not have been applied.
	errUnknown = errors.New("sim: outcome unknown")
	// errNoAnswer: the client stopped waiting for an answer.
	errNoAnswer = errors.New("sim: no answer in time")
)

// node is one member running leasehold's own node code: a raftnode.Node
// (Open, Apply, ReadIndex, Read, the leadership watch with its barrier and
// token floor) on in-memory stores that survive a crash (the log and
// stable store are treated as fsync'd on every append, as raft-wal's
// are), and a real lessor wired to it as the server wires it
// (server.LessorPropose, server.PromoteLessor on leadership, Demote on its
// loss, Observe on every applied entry). Clients reach it through serve;
// a paused node (see pause) holds their requests until it resumes.
type node struct {
	id     string
	c      *Cluster
	dir    string // data dir: holds the cluster id only
	pause  *pause
	clock  skewClock
	logs   *walStore   // log store; kept across restarts
	stable stableStore // kept across restarts
	snaps  *raft.InmemSnapshotStore

	mu     sync.Mutex // protects following
	rn     *raftnode.Node
	trans  *faultTransport
	lessor *lessor.Lessor
	up     bool
	// promoted is the term in which this node's lessor was promoted, 0
	// once demoted.
	promoted atomic.Uint64
	// lastApplied is the index the node had applied when it last stopped.
	lastApplied atomic.Uint64
}

// replica checks, after every entry one incarnation of a node applies, the
// properties one replica can see alone (P2, P5, P6), records the entry's
// nonce (P11) and passes the result to the lessor, as the server's
// observer does. Its fields other than rn are used only on the goroutine
// that applies entries.
type replica struct {
	n  *node
	l  *lessor.Lessor
	rn atomic.Pointer[raftnode.Node] // set once Open returned

	running   atomic.Bool       // Open returned: a restore now is a snapshot install
	holders   map[string]uint64 // name → token of the live grant, from events (P6)
	lastToken uint64            // newest token granted, in apply order (P2)
	restored  bool              // the state was replaced: rebuild holders from it
}

// observe is the node's raftnode Observer.
func (r *replica) observe(index uint64, res *fsm.Result) {
	n := r.n
	n.pause.wait() // a paused process applies nothing
	var l raft.Log
	if n.logs.GetLog(index, &l) == nil {
		var cmd fsmpb.Command
		if proto.Unmarshal(l.Data, &cmd) == nil {
			n.c.outcomes.appliedAt(&cmd, index)
		}
	}
	if rn := r.rn.Load(); rn != nil {
		var hash uint64
		fresh := r.restored
		rn.ReadAt(func(m *fsm.Machine, _ uint64) {
			if r.restored {
				r.rebuild(m)
			}
			checkModes(n.c, n.id, index, m)
			snap, err := m.Snapshot()
			if err != nil {
				n.c.violate("P9", "%s index %d: snapshot: %v", n.id, index, err)
			}
			h := fnv.New64a()
			h.Write(snap)
			hash = h.Sum64()
		})
		if !fresh { // the rebuilt holders include this entry's grants
			r.check(index, res)
		}
		n.c.applied(n.id, index, hash, res)
	}
	r.l.Observe(res)
}

// onRestore is the node's raftnode OnRestore.
func (r *replica) onRestore(uint64) {
	r.restored = true
	if r.running.Load() {
		r.n.c.count(&r.n.c.counters.SnapshotInstalls)
	}
}

// rebuild sets holders and lastToken from the state m.
func (r *replica) rebuild(m *fsm.Machine) {
	clear(r.holders)
	locks, _ := m.List("", 1<<30)
	for _, l := range locks {
		if l.Holder != nil && !isModeName(l.Name) {
			r.holders[l.Name] = l.Holder.GetToken()
		}
	}
	r.lastToken = m.Token()
	r.restored = false
}

// check follows the events of one entry: a grant while the name has a live
// grant breaks P6 (but for W5's names), a token not above every earlier one
// breaks P2.
func (r *replica) check(index uint64, res *fsm.Result) {
	c, id := r.n.c, r.n.id
	for _, ev := range res.Events {
		// A W5 name has several readers at once: checkModes checks it
		// instead of P6.
		multi := isModeName(ev.Name)
		switch ev.Type {
		case leaseholdv1.EventType_EVENT_TYPE_ACQUIRED:
			if t, ok := r.holders[ev.Name]; ok && !multi {
				c.violate("P6", "%s index %d: %q granted token %d while token %d is live", id, index, ev.Name, ev.Token, t)
			}
			if ev.Token <= r.lastToken {
				c.violate("P2", "%s index %d: %q granted token %d after token %d", id, index, ev.Name, ev.Token, r.lastToken)
			}
			if !multi {
				r.holders[ev.Name] = ev.Token
			}
			r.lastToken = max(r.lastToken, ev.Token)
		case leaseholdv1.EventType_EVENT_TYPE_RELEASED, leaseholdv1.EventType_EVENT_TYPE_EXPIRED:
			delete(r.holders, ev.Name)
		}
	}
}

// start boots (or reboots) the node on its surviving stores.
func (n *node) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.c
	_, inner := raft.NewInmemTransportWithTimeout(raft.ServerAddress(n.id), 200*time.Millisecond)
	trans := &faultTransport{InmemTransport: inner, id: n.id, net: c.net, addr: func(a raft.ServerAddress) string { return string(a) }}
	lcfg := lessor.DefaultConfig()
	lcfg.Clock = n.clock
	lcfg.Drift = c.cfg.Drift
	lcfg.Grace = 2 * c.cfg.LeaderLease // as the server sets it
	lcfg.Tick = 20 * time.Millisecond
	lcfg.Logger = slog.New(slog.DiscardHandler)
	rep := &replica{n: n, holders: map[string]uint64{}}
	lcfg.Confirmer = confirmer{rep}
	l, err := lessor.New(lcfg, proposer{rep})
	if err != nil {
		return err
	}
	rep.l = l
	cfg := raftnode.DefaultConfig()
	cfg.NodeID = n.id
	cfg.DataDir = n.dir
	cfg.Transport = trans
	cfg.Stores = &raftnode.Stores{Log: n.logs, Stable: n.stable, Snapshots: n.snaps}
	for _, p := range c.nodes { // used only on empty stores
		cfg.Bootstrap = append(cfg.Bootstrap, raftnode.Peer{ID: p.id, RaftAddr: p.id})
	}
	cfg.Observer = rep.observe
	cfg.OnRestore = rep.onRestore
	cfg.OnLeadership = func(leader bool) { n.leadership(rep, leader) }
	cfg.HeartbeatTimeout = c.cfg.ElectionTimeout
	cfg.ElectionTimeout = c.cfg.ElectionTimeout
	cfg.LeaderLeaseTimeout = c.cfg.LeaderLease
	cfg.CommitTimeout = 5 * time.Millisecond
	cfg.SnapshotInterval = 500 * time.Millisecond
	cfg.SnapshotThreshold = 40
	cfg.TrailingLogs = 20
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Now = n.clock.Now // as the server sets it: the lessor's clock
	rn, err := raftnode.Open(cfg)
	if err != nil {
		l.Close()
		return err
	}
	rep.rn.Store(rn)
	rep.running.Store(true)
	n.rn, n.trans, n.lessor, n.up = rn, trans, l, true
	return nil
}

// leadership is the node's OnLeadership, as the server's: after the
// barrier, the lessor is promoted with the applied sessions and
// lock-delays; on loss, demoted.
func (n *node) leadership(rep *replica, leader bool) {
	if !leader {
		n.promoted.Store(0)
		rep.l.Demote()
		return
	}
	rn := rep.rn.Load()
	for rn == nil { // elected before Open returned
		time.Sleep(time.Millisecond)
		rn = rep.rn.Load()
	}
	term := rn.Raft().CurrentTerm()
	server.PromoteLessor(rn, rep.l)
	n.promoted.Store(term)
	n.c.leaderElected(n.id, term)
}

// crash stops the node as kill -9 would: raft and the lessor stop, the
// state machine is lost, the stores (fsync'd) survive. The node is first
// cut off and left to apply what it committed, so that raft drops no
// future it accepted.
func (n *node) crash() {
	n.c.net.set(func(nw *network) { cutOff(nw, n.c.nodes, n) })
	// n.mu is not held while waiting: inside the synctest bubble a
	// goroutine blocked on a mutex stops virtual time, and raft's shutdown
	// waits for RPC timers.
	n.mu.Lock()
	if !n.up {
		n.mu.Unlock()
		return
	}
	n.up = false
	rn, l := n.rn, n.lessor
	n.mu.Unlock()
	applied := func() (at uint64) {
		rn.ReadAt(func(_ *fsm.Machine, i uint64) { at = i })
		return at
	}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if applied() >= rn.Raft().CommitIndex() {
			break
		}
	}
	l.Close() // as the server closes: the lessor, then the node
	_ = rn.Close()
	n.lastApplied.Store(applied())
	n.promoted.Store(0)
}

// freeze pauses the node (see pause). A leader's raft main loop is also
// held in a log write, by a barrier proposed as the pause begins: raft's
// timers run in the process, and a leader loop left running would step
// down on its own when its lease passed without answers, which a stopped
// process never does.
func (n *node) freeze() {
	n.pause.freeze()
	if rn, _ := n.current(); rn != nil && rn.IsLeader() {
		f := rn.Raft().Barrier(0)
		n.c.holding.Go(func() { _ = f.Error() })
	}
}

// current returns the running incarnation, or nil when the node is down.
func (n *node) current() (*raftnode.Node, *lessor.Lessor) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.up {
		return nil, nil
	}
	return n.rn, n.lessor
}

// leading returns the node's raft node and lessor when it believes it
// leads and promoted its lessor in its current term; a deposed leader that
// has not noticed still does. It is where clients send their requests.
func (n *node) leading() (*raftnode.Node, *lessor.Lessor, bool) {
	rn, l := n.current()
	if rn == nil || !rn.IsLeader() || n.promoted.Load() != rn.Raft().CurrentTerm() {
		return nil, nil, false
	}
	return rn, l, true
}

// leads reports whether the node believes it leads (see leading).
func (n *node) leads() bool {
	_, _, ok := n.leading()
	return ok
}

// serve runs h, a request's handling on the node, as the node's server
// would once the request arrived: at once, or, while the node is paused,
// when it resumes (the request queued in its socket; h is told so). The caller waits
// until ctx ends: errNoAnswer then, while h may still run later. A node
// that is down refuses (errNotLeader: nothing was done).
func (n *node) serve(ctx context.Context, h func(rn *raftnode.Node, l *lessor.Lessor, queued bool) error) error {
	run := func(queued bool) error {
		rn, l := n.current()
		if rn == nil {
			return errNotLeader
		}
		return h(rn, l, queued)
	}
	if !n.pause.paused() {
		return run(false)
	}
	done := make(chan error, 1)
	n.c.queued.Go(func() {
		n.pause.wait()
		done <- run(true)
	})
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return errNoAnswer
	}
}

// apply proposes cmd on this node as the server's handlers do
// (raftnode.Node.Apply). errNotLeader means nothing was applied;
// errUnknown that it may have been.
func (n *node) apply(ctx context.Context, cmd *fsmpb.Command) (fsm.Result, error) {
	return n.applyThen(ctx, cmd, nil)
}

// applyThen is apply, running then (when not nil) in the same request
// once cmd applied, as a handler that renews the session it answers.
func (n *node) applyThen(ctx context.Context, cmd *fsmpb.Command, then func(l *lessor.Lessor)) (fsm.Result, error) {
	stamped, nonce := n.c.outcomes.stamp(cmd)
	var res fsm.Result
	err := n.serve(ctx, func(rn *raftnode.Node, l *lessor.Lessor, _ bool) error {
		r, err := rn.Apply(ctx, stamped)
		if err == nil && then != nil {
			then(l)
		}
		res = r
		return err
	})
	switch {
	case err == nil:
		return res, nil
	case errors.Is(err, errNotLeader):
		return fsm.Result{}, errNotLeader
	case notApplied(err):
		n.c.outcomes.reportedNotApplied(nonce, cmd)
		return fsm.Result{}, errNotLeader
	}
	return fsm.Result{}, errUnknown
}

// read runs f on n's applied state after readBarrier, as the server's
// linearizable reads do.
func (n *node) read(ctx context.Context, f func(m *fsm.Machine)) error {
	return n.serve(ctx, func(rn *raftnode.Node, _ *lessor.Lessor, _ bool) error {
		if err := readBarrier(ctx, rn); err != nil {
			return err
		}
		rn.Read(f)
		return nil
	})
}

// renew sends one renewal of lease to n and returns its answer as the
// server answers a KeepAliveStream message (server.RenewLeases): the
// result's error code ("" renewed) and the term the node's lessor was
// promoted in. errNotLeader: n does not lead; errNoAnswer: none in time.
func (n *node) renew(ctx context.Context, lease string) (code string, term uint64, err error) {
	err = n.serve(ctx, func(rn *raftnode.Node, l *lessor.Lessor, queued bool) error {
		if !rn.IsLeader() { // the handler forwards: not this node's answer
			return errNotLeader
		}
		res, err := server.RenewLeases(context.Background(), l, []string{lease})
		if queued && (err != nil || res[0].GetErrorCode() != "") {
			n.c.count(&n.c.counters.ResumedRefusals)
		}
		if err != nil {
			return errNotLeader
		}
		code, term = res[0].GetErrorCode(), n.promoted.Load()
		return nil
	})
	return code, term, err
}

// walStore is the node's log store as raft sees raft-wal, the server's
// log store: monotonic, so a follower that installs a snapshot drops its
// whole log instead of compacting it (unless raftnode's guard against
// hashicorp/raft#697 keeps the entries after the snapshot). (Compacted, a
// follower's log can keep entries past the snapshot from an older term
// while losing the snapshot's own index; the leader then walks back
// without a backoff and sends the snapshot again, without end — inside the
// synctest bubble virtual time stops.) Entries live in a raft.InmemStore,
// replaced by an empty one when raft deletes everything (raft asks for
// [first, MaxUint64], a range the InmemStore would walk one index at a
// time). Writes wait while the node is paused.
type walStore struct {
	pause *pause

	mu sync.Mutex // protects s
	s  *raft.InmemStore
}

var _ raft.MonotonicLogStore = (*walStore)(nil)

func newWALStore(p *pause) *walStore { return &walStore{pause: p, s: raft.NewInmemStore()} }

func (w *walStore) store() *raft.InmemStore {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.s
}

// IsMonotonic reports true, as raft-wal does.
func (*walStore) IsMonotonic() bool { return true }

func (w *walStore) FirstIndex() (uint64, error)        { return w.store().FirstIndex() }
func (w *walStore) LastIndex() (uint64, error)         { return w.store().LastIndex() }
func (w *walStore) GetLog(i uint64, l *raft.Log) error { return w.store().GetLog(i, l) }

func (w *walStore) StoreLog(l *raft.Log) error {
	w.pause.wait()
	return w.store().StoreLog(l)
}

func (w *walStore) StoreLogs(logs []*raft.Log) error {
	w.pause.wait()
	return w.store().StoreLogs(logs)
}

// DeleteRange deletes [lo, hi]: a prefix (compaction), a suffix (a
// conflicting tail), or everything.
func (w *walStore) DeleteRange(lo, hi uint64) error {
	w.pause.wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	first, err := w.s.FirstIndex()
	if err != nil {
		return err
	}
	last, err := w.s.LastIndex()
	if err != nil {
		return err
	}
	switch {
	case last == 0:
		return nil // empty
	case lo <= first && hi >= last:
		w.s = raft.NewInmemStore()
		return nil
	case hi > last:
		hi = last
	}
	return w.s.DeleteRange(lo, hi)
}

// stableStore is the node's stable store (term and vote); writes wait
// while the node is paused.
type stableStore struct {
	*raft.InmemStore
	pause *pause
}

func (s stableStore) Set(k, v []byte) error {
	s.pause.wait()
	return s.InmemStore.Set(k, v)
}

func (s stableStore) SetUint64(k []byte, v uint64) error {
	s.pause.wait()
	return s.InmemStore.SetUint64(k, v)
}

// confirmer is the lessor's Confirmer, as the server's
// (server.ConfirmForLessor).
type confirmer struct{ rep *replica }

func (c confirmer) ConfirmLeadership(ctx context.Context) error {
	rn := c.rep.rn.Load()
	if rn == nil {
		return lessor.ErrNotLeader
	}
	return server.ConfirmForLessor(ctx, rn)
}

// proposer lets the lessor propose through its node, as the server's does
// (server.LessorPropose), each proposal with a nonce (P11).
type proposer struct{ rep *replica }

func (p proposer) Propose(ctx context.Context, cmd *fsmpb.Command) (fsm.Result, error) {
	rn := p.rep.rn.Load()
	if rn == nil {
		return fsm.Result{}, fmt.Errorf("%w: the node is starting", lessor.ErrNotApplied)
	}
	stamped, nonce := p.rep.n.c.outcomes.stamp(cmd)
	res, err := server.LessorPropose(ctx, rn, stamped)
	if errors.Is(err, lessor.ErrNotApplied) {
		p.rep.n.c.outcomes.reportedNotApplied(nonce, cmd)
	}
	return res, err
}
