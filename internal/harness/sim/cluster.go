//go:build leasehold_sim

package sim

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/hashicorp/raft"

	leaseholdv1 "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
	"github.com/leasehold/leasehold/internal/harness/linz"
)

// Config is one simulation run.
type Config struct {
	Seed uint64
	// Duration is the cluster time of the fault phase. Default 60 s.
	Duration time.Duration
	// ElectionTimeout is raft's heartbeat and election timeout. Default 200 ms.
	ElectionTimeout time.Duration
	// LeaderLease is raft's leader lease; the lessor's grace is twice it,
	// as the server sets it. Default 200 ms (raft's largest: the heartbeat
	// timeout). A deposed leader that does not hear of its successor
	// acknowledges renewals for up to the lease after its last contact
	// with a quorum; a renewal the grace window must cover is one sent more
	// than Margin + 2·Drift·TTL after the successor's promotion, so only a
	// lease above Margin lets such a renewal happen at all (the server's
	// defaults: lease 250 ms, margin 100 ms).
	LeaderLease time.Duration
	// Drift is the lessor's and the clients' drift bound. Default 0.02.
	Drift float64
	// Skew is the largest |rate−1| of a node's lease clock. Default 0.015
	// (within Drift). Beyond Drift, P7 may fail; CheckP7 is then false.
	Skew float64
	// CheckP7 fails the run on an early expiry (set when Skew ≤ Drift).
	CheckP7 bool
	// CheckP10 fails the run when a W1 holder, whose TTL exceeds election
	// timeout + grace + one keepalive interval, sees its session lost
	// (set when Skew ≤ Drift).
	CheckP10 bool
	// Margin is what a holder subtracts from its local deadline. Default
	// 100 ms, the client's.
	Margin time.Duration
}

func (c *Config) defaults() {
	if c.Duration == 0 {
		c.Duration = 60 * time.Second
	}
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = 200 * time.Millisecond
	}
	if c.LeaderLease == 0 {
		c.LeaderLease = 200 * time.Millisecond
	}
	if c.Drift == 0 {
		c.Drift = 0.02
	}
	if c.Skew == 0 {
		c.Skew = 0.015
	}
	if c.Margin == 0 {
		c.Margin = 100 * time.Millisecond
	}
}

// Counters say which fault and outcome families a run exercised.
type Counters struct {
	LeaderChanges    int
	Expiries         int
	StaleRejections  int // fenced puts and resource writes refused
	SnapshotInstalls int
	Partitions       int
	OneWayCuts       int
	Delays           int
	Drops            int
	Crashes          int
	Pauses           int // node processes paused and resumed
	PowerLosses      int // every node crashed at once
	Transfers        int // leadership transfers started
	DeposedRenewals  int // renewals a deposed leader acknowledged after its successor's promotion
	ResumedRefusals  int // renewals that queued at a paused leader and were refused when it resumed
	EarlyExpiries    int // P7 failures (violations only when CheckP7)
	SessionsLost     int // W1 sessions their holder saw end (P10; violations only when CheckP10)
	Operations       int // client operations checked
	LostUnfenced     int // acknowledged writes the unfenced control resource lost
	Undecided        int // histories porcupine could not decide within its time limit
	FailoverMs       []int64
}

// Add sums o into c.
func (c *Counters) Add(o Counters) {
	c.LeaderChanges += o.LeaderChanges
	c.Expiries += o.Expiries
	c.StaleRejections += o.StaleRejections
	c.SnapshotInstalls += o.SnapshotInstalls
	c.Partitions += o.Partitions
	c.OneWayCuts += o.OneWayCuts
	c.Delays += o.Delays
	c.Drops += o.Drops
	c.Crashes += o.Crashes
	c.Pauses += o.Pauses
	c.PowerLosses += o.PowerLosses
	c.Transfers += o.Transfers
	c.DeposedRenewals += o.DeposedRenewals
	c.ResumedRefusals += o.ResumedRefusals
	c.EarlyExpiries += o.EarlyExpiries
	c.SessionsLost += o.SessionsLost
	c.Operations += o.Operations
	c.LostUnfenced += o.LostUnfenced
	c.Undecided += o.Undecided
	c.FailoverMs = append(c.FailoverMs, o.FailoverMs...)
}

// String prints the counters on one line.
func (c Counters) String() string {
	return fmt.Sprintf("leader_changes=%d expiries=%d stale_rejections=%d snapshot_installs=%d partitions=%d one_way=%d delays=%d drops=%d crashes=%d pauses=%d power_losses=%d transfers=%d deposed_renewals=%d resumed_refusals=%d early_expiries=%d sessions_lost=%d ops=%d lost_unfenced=%d undecided=%d",
		c.LeaderChanges, c.Expiries, c.StaleRejections, c.SnapshotInstalls, c.Partitions, c.OneWayCuts, c.Delays, c.Drops, c.Crashes, c.Pauses, c.PowerLosses, c.Transfers, c.DeposedRenewals, c.ResumedRefusals, c.EarlyExpiries, c.SessionsLost, c.Operations, c.LostUnfenced, c.Undecided)
}

// Report is the outcome of one run.
type Report struct {
	Seed       uint64
	Violations []string
	Counters   Counters
	// History and the porcupine check, kept for a failing seed's files.
	lockOps, putOps []porcupine.Operation
	lockRes, putRes linz.Result
	Undecided       []string // histories porcupine could not decide in time
	Log             []string // fault schedule, as applied
}

// Cluster is three nodes, their network and the run's checks.
type Cluster struct {
	cfg      Config
	net      *network
	outcomes *outcomes    // P11
	seq      atomic.Int64 // the history's clock (now)
	nodes    []*node
	start    time.Time
	dir      string         // the nodes' data dirs
	queued   sync.WaitGroup // requests queued at a paused node
	holding  sync.WaitGroup // waits on the futures that hold paused leaders

	mu        sync.Mutex // protects following
	counters  Counters
	viol      []string
	hashes    map[uint64]uint64 // index → state hash, from the first node to apply it (P5)
	expiredAt map[string]time.Time
	lastAck   map[string]ackInfo
	closed    map[string]bool   // sessions their holder closed: their end is no expiry (P7)
	freezeAt  map[int]time.Time // W4 holder → when it is to freeze (see transfer)
	leader    string
	promoted  uint64    // the newest term whose leader was promoted
	healedAt  time.Time // zero unless waiting for a leader after healing
	// pinned: until pinnedUntil, W4 holders reach only this node (see pauseNode).
	pinned      *node
	pinnedUntil time.Time
	lockOps     []porcupine.Operation
	putOps      []porcupine.Operation
	log         []string
}

type ackInfo struct {
	sent time.Time
	ttl  time.Duration
}

func newCluster(cfg Config, dir string) *Cluster {
	c := &Cluster{cfg: cfg, net: newNetwork(cfg.Seed), outcomes: newOutcomes(), start: time.Now(), dir: dir, hashes: map[uint64]uint64{}, expiredAt: map[string]time.Time{}, lastAck: map[string]ackInfo{}, closed: map[string]bool{}, freezeAt: map[int]time.Time{}}
	rng := rand.New(rand.NewPCG(cfg.Seed, 1))
	c.net.pauses = map[string]*pause{}
	for i := range 3 {
		rate := 1 + (rng.Float64()*2-1)*cfg.Skew
		id := fmt.Sprintf("n%d", i+1)
		p := &pause{}
		c.net.pauses[id] = p
		c.nodes = append(c.nodes, &node{id: id, c: c, dir: filepath.Join(dir, id), pause: p, clock: skewClock{start: c.start, rate: rate, pause: p},
			logs: newWALStore(p), stable: stableStore{InmemStore: raft.NewInmemStore(), pause: p}, snaps: raft.NewInmemSnapshotStore()})
	}
	return c
}

func (c *Cluster) boot() error {
	for _, n := range c.nodes {
		if err := n.start(); err != nil {
			return err
		}
	}
	c.connect()
	return nil
}

// connect wires every running node's transport to every other's.
func (c *Cluster) connect() {
	for _, a := range c.nodes {
		for _, b := range c.nodes {
			if a != b && a.trans != nil && b.trans != nil {
				a.trans.Connect(raft.ServerAddress(b.id), b.trans.InmemTransport)
			}
		}
	}
}

func (c *Cluster) shutdown() {
	for _, n := range c.nodes {
		n.pause.thaw()
	}
	for _, n := range c.nodes {
		n.crash()
	}
	c.queued.Wait()
	c.holding.Wait()
}

// now is the history's clock: a counter read when an operation is called
// and when it returns, so that A returns before B is called exactly when
// that happened. (Virtual time does not advance while goroutines run: many
// operations would share one instant, look concurrent to porcupine, and
// make its search far longer.)
func (c *Cluster) now() int64 { return c.seq.Add(1) }

func (c *Cluster) logf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log = append(c.log, fmt.Sprintf("%8.3fs ", time.Since(c.start).Seconds())+fmt.Sprintf(format, args...))
}

func (c *Cluster) violate(prop, format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.viol = append(c.viol, prop+": "+fmt.Sprintf(format, args...))
}

func (c *Cluster) count(p *int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	*p++
}

func (c *Cluster) leaderElected(id string, term uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.promoted = max(c.promoted, term)
	if c.leader != "" && c.leader != id {
		c.counters.LeaderChanges++
	}
	c.leader = id
	if !c.healedAt.IsZero() {
		c.counters.FailoverMs = append(c.counters.FailoverMs, time.Since(c.healedAt).Milliseconds())
		c.healedAt = time.Time{}
	}
}

// applied records one applied entry: replicas must agree on the state hash
// at every index (P5), and the first application of an expiry is checked
// against the session's last acknowledged renewal (P7).
func (c *Cluster) applied(id string, index, hash uint64, res *fsm.Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, seen := c.hashes[index]
	if seen {
		if h != hash {
			c.viol = append(c.viol, fmt.Sprintf("P5: %s index %d: state hash %x, another replica had %x", id, index, hash, h))
		}
		return
	}
	c.hashes[index] = hash
	now := time.Now()
	for _, ev := range res.Events {
		if ev.Type == leaseholdv1.EventType_EVENT_TYPE_EXPIRED {
			c.counters.Expiries++
		}
	}
	for _, lease := range res.EndedSessions {
		if _, ok := c.expiredAt[lease]; ok || c.closed[lease] {
			continue
		}
		c.expiredAt[lease] = now
		if a, ok := c.lastAck[lease]; ok {
			c.checkEarlyLocked(lease, a, now)
		}
	}
}

// safeApply applies cmd to m; a panic (P9) is recorded as a violation and
// the entry's result is an error, so the run goes on to its other checks.
func (c *Cluster) safeApply(id string, m *fsm.Machine, index uint64, cmd *fsmpb.Command) (res fsm.Result) {
	defer func() {
		if r := recover(); r != nil {
			c.violate("P9", "%s index %d: panic applying %v: %v", id, index, cmd, r)
			res = fsm.Result{Err: fmt.Errorf("sim: panic: %v", r)}
		}
	}()
	return m.Apply(index, cmd)
}

// holderBound is how long after sending its last acknowledged renewal a
// holder may still believe it holds: TTL·(1−drift) − margin.
func (c *Cluster) holderBound(ttl time.Duration) time.Duration {
	return ttl - time.Duration(float64(ttl)*c.cfg.Drift) - c.cfg.Margin
}

func (c *Cluster) checkEarlyLocked(lease string, a ackInfo, ended time.Time) {
	if safe := a.sent.Add(c.holderBound(a.ttl)); ended.Before(safe) {
		c.counters.EarlyExpiries++
		if !c.cfg.CheckP7 {
			return
		}
		c.viol = append(c.viol, fmt.Sprintf("P7: session %s ended at %.3fs, %v before its holder's deadline (renewal sent at %.3fs, TTL %v)",
			lease, ended.Sub(c.start).Seconds(), safe.Sub(ended), a.sent.Sub(c.start).Seconds(), a.ttl))
	}
}

// acked records a renewal (or creation) of lease sent at sent that the
// grantor, leader of term, acknowledged; a leader of a newer term was
// promoted already when the grantor was deposed without noticing.
func (c *Cluster) acked(lease string, sent time.Time, ttl time.Duration, term uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if term < c.promoted {
		c.counters.DeposedRenewals++
	}
	if a, ok := c.lastAck[lease]; ok && a.sent.After(sent) {
		return
	}
	a := ackInfo{sent: sent, ttl: ttl}
	c.lastAck[lease] = a
	if ended, ok := c.expiredAt[lease]; ok {
		// Only an expiry applied by the time the acknowledgment was sent can
		// be early with respect to it.
		c.checkEarlyLocked(lease, a, ended)
	}
}

// sessionLost records that a W1 holder saw its session end (P10).
func (c *Cluster) sessionLost(lease, how string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counters.SessionsLost++
	if c.cfg.CheckP10 {
		c.viol = append(c.viol, fmt.Sprintf("P10: session %s lost at %.3fs: %s", lease, time.Since(c.start).Seconds(), how))
	}
}

// record adds one client operation to the history and returns its index
// in it.
func (c *Cluster) record(put bool, client int, call int64, in linz.Input, out linz.Output) int {
	ret := c.now()
	if out.Out == linz.OutUnknown {
		ret = 1 << 62 // may take effect at any later time
	}
	op := porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counters.Operations++
	if out.Out == linz.OutStale {
		c.counters.StaleRejections++
	}
	if put {
		c.putOps = append(c.putOps, op)
		return len(c.putOps) - 1
	}
	c.lockOps = append(c.lockOps, op)
	return len(c.lockOps) - 1
}

// settledBy bounds the lock operation i, of unknown outcome, to take
// effect by now at the latest.
func (c *Cluster) settledBy(i int) {
	ret := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lockOps[i].Return = min(c.lockOps[i].Return, ret)
}

func (c *Cluster) violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := append([]string(nil), c.viol...)
	sort.Strings(v)
	return v
}

// describe prints the nodes' views for a failure message.
func (c *Cluster) describe() string {
	var b strings.Builder
	for _, n := range c.nodes {
		if rn, _ := n.current(); rn != nil {
			r := rn.Raft()
			fmt.Fprintf(&b, "%s %s term %d commit %d; ", n.id, r.State(), r.CurrentTerm(), r.CommitIndex())
		} else {
			fmt.Fprintf(&b, "%s down; ", n.id)
		}
	}
	return b.String()
}
