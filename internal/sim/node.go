//go:build leasehold_sim

package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	leaseholdv1 "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
	"github.com/leasehold/leasehold/internal/lessor"
	"github.com/leasehold/leasehold/internal/raftnode"
)

// Errors of a node's operations, as a client sees them.
var (
	// errNotLeader: the node is not the leader; nothing was applied.
	errNotLeader = errors.New("sim: not the leader")
	// errUnknown: the command may or may not have been applied.
	errUnknown = errors.New("sim: outcome unknown")
)

// node is one member: a hashicorp/raft instance on in-memory stores that
// survive a crash (the log and stable store are treated as fsync'd on
// every append, as bbolt's are), the real fsm.Machine behind a small
// raft.FSM adapter, and a real lessor on the node's skewed clock.
type node struct {
	id    string
	c     *Cluster
	clock skewClock
	logs  *walStore        // log store; kept across restarts
	store *raft.InmemStore // stable store; kept across restarts
	snaps *raft.InmemSnapshotStore

	mu      sync.Mutex // protects following
	raft    *raft.Raft
	trans   *faultTransport
	lessor  *lessor.Lessor
	fsm     *machine
	done    chan struct{} // closed on crash: stops watch
	watchWG sync.WaitGroup
	up      bool
	// barrierTerm is the term whose barrier this node applied as leader.
	barrierTerm atomic.Uint64
}

// machine adapts fsm.Machine to raft.FSM and checks, after every applied
// entry, the properties one replica can see alone (P2, P5, P6).
type machine struct {
	n *node

	mu        sync.Mutex // protects following
	m         *fsm.Machine
	applied   uint64
	holders   map[string]uint64 // name → token of the live grant, from events (P6)
	lastToken uint64            // newest token granted, in apply order (P2)
	running   bool              // raft is up: a Restore now is a snapshot install

	lessor *lessor.Lessor // set before raft starts
}

func (f *machine) Apply(l *raft.Log) any {
	var cmd fsmpb.Command
	if err := proto.Unmarshal(l.Data, &cmd); err != nil {
		panic(fmt.Sprintf("sim: undecodable log entry %d: %v", l.Index, err))
	}
	f.n.c.outcomes.appliedAt(&cmd, l.Index)
	f.mu.Lock()
	res := f.n.c.safeApply(f.n.id, f.m, l.Index, &cmd)
	f.applied = l.Index
	f.checkLocked(l.Index, &res)
	snap, err := f.m.Snapshot()
	f.mu.Unlock()
	if err != nil {
		panic(err)
	}
	h := fnv.New64a()
	h.Write(snap)
	f.n.c.applied(f.n.id, l.Index, h.Sum64(), &res)
	f.lessor.Observe(&res)
	return &res
}

// checkLocked follows the events of one Apply: a grant while the name has a
// live grant breaks P6, a token not above every earlier one breaks P2.
func (f *machine) checkLocked(index uint64, res *fsm.Result) {
	for _, ev := range res.Events {
		switch ev.Type {
		case leaseholdv1.EventType_EVENT_TYPE_ACQUIRED:
			if t, ok := f.holders[ev.Name]; ok {
				f.n.c.violate("P6", "%s index %d: %q granted token %d while token %d is live", f.n.id, index, ev.Name, ev.Token, t)
			}
			if ev.Token <= f.lastToken {
				f.n.c.violate("P2", "%s index %d: %q granted token %d after token %d", f.n.id, index, ev.Name, ev.Token, f.lastToken)
			}
			f.holders[ev.Name] = ev.Token
			f.lastToken = max(f.lastToken, ev.Token)
		case leaseholdv1.EventType_EVENT_TYPE_RELEASED, leaseholdv1.EventType_EVENT_TYPE_EXPIRED:
			delete(f.holders, ev.Name)
		}
	}
}

func (f *machine) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	data, err := f.m.Snapshot()
	return snapshot(data), err
}

func (f *machine) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.m.Restore(data); err != nil {
		return err
	}
	clear(f.holders)
	locks, _ := f.m.List("", 1<<30)
	for _, l := range locks {
		if l.Holder != nil {
			f.holders[l.Name] = l.Holder.GetToken()
		}
	}
	f.lastToken = f.m.Token()
	if f.running {
		f.n.c.count(&f.n.c.counters.SnapshotInstalls)
	}
	return nil
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (snapshot) Release() {}

// start boots (or reboots) the node on its surviving stores.
func (n *node) start(bootstrap bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.c
	_, inner := raft.NewInmemTransportWithTimeout(raft.ServerAddress(n.id), 200*time.Millisecond)
	n.trans = &faultTransport{InmemTransport: inner, id: n.id, net: c.net, addr: func(a raft.ServerAddress) string { return string(a) }}
	n.fsm = &machine{n: n, m: fsm.New(fsm.DefaultLimits()), holders: map[string]uint64{}}
	lcfg := lessor.DefaultConfig()
	lcfg.Clock = n.clock
	lcfg.Drift = c.cfg.Drift
	lcfg.Grace = 2 * c.cfg.LeaderLease // as the server sets it
	lcfg.Tick = 20 * time.Millisecond
	lcfg.Logger = slog.New(slog.DiscardHandler)
	lcfg.Confirmer = confirmer{n}
	l, err := lessor.New(lcfg, proposer{n})
	if err != nil {
		return err
	}
	n.lessor = l
	n.fsm.lessor = l
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(n.id)
	rc.Logger = hclog.NewNullLogger()
	rc.HeartbeatTimeout = c.cfg.ElectionTimeout
	rc.ElectionTimeout = c.cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = c.cfg.LeaderLease
	rc.CommitTimeout = 5 * time.Millisecond
	rc.SnapshotInterval = 500 * time.Millisecond
	rc.SnapshotThreshold = 40
	rc.TrailingLogs = 20
	notify := make(chan bool, 16)
	rc.NotifyCh = notify
	if bootstrap {
		var conf raft.Configuration
		for _, p := range c.nodes {
			conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.id), Address: raft.ServerAddress(p.id)})
		}
		if err := raft.BootstrapCluster(rc, n.logs, n.store, n.snaps, n.trans, conf); err != nil {
			return err
		}
	}
	// The server's guard against hashicorp/raft#697 (raftnode.KeepSuffixOnInstall).
	logs, snaps, follow := raftnode.KeepSuffixOnInstall(n.logs, n.snaps, slog.New(slog.DiscardHandler))
	r, err := raft.NewRaft(rc, n.fsm, logs, n.store, snaps, n.trans)
	if err != nil {
		return err
	}
	follow(r)
	n.fsm.mu.Lock()
	n.fsm.running = true
	n.fsm.mu.Unlock()
	n.raft = r
	n.up = true
	n.done = make(chan struct{})
	done := n.done
	n.watchWG.Go(func() { n.watch(r, l, notify, done) })
	return nil
}

// watch runs the lessor while this node leads: after a barrier on
// election, Promote with the applied sessions and lock-delays; Demote on loss.
func (n *node) watch(r *raft.Raft, l *lessor.Lessor, notify <-chan bool, done <-chan struct{}) {
	leader := false
	for {
		var is bool
		select {
		case is = <-notify:
		case <-done:
			return
		}
		if is == leader {
			continue
		}
		if is {
			term := r.CurrentTerm()
			if r.Barrier(2*time.Second).Error() != nil {
				continue
			}
			n.barrierTerm.Store(term)
			// As the server does, no entry is applied between reading the
			// live sessions and the lessor tracking them.
			n.fsm.mu.Lock()
			l.Promote(n.fsm.m.Sessions(), n.fsm.m.LockDelays())
			n.fsm.mu.Unlock()
			n.c.leaderElected(n.id, term)
		} else {
			l.Demote()
		}
		leader = is
	}
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
	r, f, l, trans, done := n.raft, n.fsm, n.lessor, n.trans, n.done
	n.mu.Unlock()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		f.mu.Lock()
		applied := f.applied
		f.mu.Unlock()
		if applied >= r.CommitIndex() {
			break
		}
	}
	_ = r.Shutdown().Error()
	close(done)
	n.watchWG.Wait()
	l.Close()
	_ = trans.Close()
}

// leading returns the node's raft and lessor when it believes it leads and
// has applied its barrier; a deposed leader that has not noticed still does.
func (n *node) leading() (*raft.Raft, *lessor.Lessor, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.up || n.raft.State() != raft.Leader || n.barrierTerm.Load() != n.raft.CurrentTerm() {
		return nil, nil, false
	}
	return n.raft, n.lessor, true
}

// leads reports whether the node believes it leads (see leading).
func (n *node) leads() bool {
	_, _, ok := n.leading()
	return ok
}

// apply proposes cmd on this node if it leads. errNotLeader means nothing
// was applied; errUnknown that it may have been.
func (n *node) apply(ctx context.Context, cmd *fsmpb.Command) (fsm.Result, error) {
	r, _, ok := n.leading()
	if !ok {
		return fsm.Result{}, errNotLeader
	}
	data, nonce, err := n.c.outcomes.encode(cmd)
	if err != nil {
		n.c.violate("P11", "internal: encode %v: %v", cmd, err)
		return fsm.Result{}, errUnknown
	}
	f := r.Apply(data, time.Second)
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		return fsm.Result{}, errUnknown
	}
	switch {
	case err != nil && notApplied(err):
		n.c.outcomes.reportedNotApplied(nonce, cmd)
		return fsm.Result{}, errNotLeader
	case err != nil:
		return fsm.Result{}, errUnknown
	}
	return *f.Response().(*fsm.Result), nil
}

// read runs f on n's applied state after readBarrier.
func (n *node) read(ctx context.Context, f func(m *fsm.Machine)) error {
	if err := readBarrier(ctx, n); err != nil {
		return err
	}
	n.fsm.mu.Lock()
	defer n.fsm.mu.Unlock()
	f(n.fsm.m)
	return nil
}

// readIndex is the read barrier raftnode.ReadIndex is: leadership
// confirmed by a quorum, and every entry committed before the call applied
// here.
func (n *node) readIndex(ctx context.Context) error {
	r, _, ok := n.leading()
	if !ok {
		return errNotLeader
	}
	commit := r.CommitIndex()
	if r.VerifyLeader().Error() != nil {
		return errNotLeader
	}
	for {
		n.fsm.mu.Lock()
		applied := n.fsm.applied
		n.fsm.mu.Unlock()
		if applied >= commit {
			return nil
		}
		select {
		case <-ctx.Done():
			return errNotLeader
		case <-time.After(time.Millisecond):
		}
	}
}

// confirmer is the lessor's Confirmer: raft's VerifyLeader.
type confirmer struct{ n *node }

func (c confirmer) ConfirmLeadership(ctx context.Context) error {
	r, _, ok := c.n.leading()
	if !ok || r.VerifyLeader().Error() != nil {
		return lessor.ErrNotLeader
	}
	return nil
}

// walStore is the node's log store as raft sees raft-wal, the server's
// log store: monotonic, so a follower that installs a snapshot drops its
// whole log instead of compacting it (unless the server's guard against
// hashicorp/raft#697, which wraps it in start, keeps the entries after the
// snapshot). (Compacted, a follower's log can keep
// entries past the snapshot from an older term while losing the snapshot's
// own index; the leader then walks back without a backoff and sends the
// snapshot again, without end — inside the synctest bubble virtual time
// stops.) Entries live in a raft.InmemStore, replaced by an empty one when
// raft deletes everything (raft asks for [first, MaxUint64], a range the
// InmemStore would walk one index at a time).
type walStore struct {
	mu sync.Mutex // protects s
	s  *raft.InmemStore
}

var _ raft.MonotonicLogStore = (*walStore)(nil)

func newWALStore() *walStore { return &walStore{s: raft.NewInmemStore()} }

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
func (w *walStore) StoreLog(l *raft.Log) error         { return w.store().StoreLog(l) }
func (w *walStore) StoreLogs(logs []*raft.Log) error   { return w.store().StoreLogs(logs) }

// DeleteRange deletes [lo, hi]: a prefix (compaction), a suffix (a
// conflicting tail), or everything.
func (w *walStore) DeleteRange(lo, hi uint64) error {
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

// proposer lets the lessor propose through its node.
type proposer struct{ n *node }

// As the server's proposer does, an error that certainly did not apply
// wraps lessor.ErrNotApplied.
func (p proposer) Propose(ctx context.Context, cmd *fsmpb.Command) (fsm.Result, error) {
	res, err := p.n.apply(ctx, cmd)
	if errors.Is(err, errNotLeader) {
		err = fmt.Errorf("%w: %w", lessor.ErrNotApplied, err)
	}
	return res, err
}
