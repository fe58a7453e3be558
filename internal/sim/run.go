//go:build leasehold_sim

package sim

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/internal/linz"
)

// Workload shapes.
const (
	w1TTL     = 10 * time.Second // W1: long-TTL lock table
	w2TTL     = 1500 * time.Millisecond
	w1Clients = 3
	w2Clients = 3
	// W4: holders of the shortest lease the server grants (MinTTL).
	w4TTL     = time.Second
	w4Holders = 8
)

var (
	w1Names = []string{"l0", "l1", "l2"}
	w2Names = []string{"w0", "w1"}
	w4Names = []string{"g0", "g1"}
)

// Run runs one seed: boot three nodes, run the workloads under the seed's
// fault schedule for cfg.Duration of cluster time, heal, check liveness and
// then every history. It must run inside a testing/synctest bubble.
func Run(cfg Config) Report {
	cfg.defaults()
	rep := Report{Seed: cfg.Seed}
	dir, err := os.MkdirTemp("", "leasehold-sim-")
	if err != nil {
		rep.Violations = []string{"data dirs: " + err.Error()}
		return rep
	}
	defer os.RemoveAll(dir)
	c := newCluster(cfg, dir)
	if err := c.boot(); err != nil {
		rep.Violations = []string{"boot: " + err.Error()}
		return rep
	}
	fenced, unfenced := newResource(true), newResource(false)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range w1Clients {
		cl := &client{c: c, id: i, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(100+i)))}
		wg.Go(func() { cl.lockTable(stop) })
	}
	for i := range w2Clients {
		cl := &client{c: c, id: w1Clients + i, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(200+i)))}
		wg.Go(func() { cl.fencedWrites(stop, fenced, unfenced) })
	}
	for i := range w4Holders {
		cl := &client{c: c, id: w1Clients + w2Clients + i, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(300+i))), sticky: true}
		wg.Go(func() { cl.shortLease(stop) })
	}
	for i := range w5Clients {
		cl := &client{c: c, id: w1Clients + w2Clients + w4Holders + i, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(400+i)))}
		wg.Go(func() { cl.modeMix(stop) })
	}
	c.faults(rand.New(rand.NewPCG(cfg.Seed, 2)))
	close(stop)
	wg.Wait()
	c.heal()
	c.liveness()
	c.shutdown()
	c.replay()

	for _, w := range c.outcomes.wrong() {
		c.violate("P11", "%s", w)
	}
	for k, lost := range fenced.lost() {
		c.violate("P4", "fenced resource %s lost acknowledged writes %v", k, lost)
	}
	for _, lost := range unfenced.lost() {
		c.counters.LostUnfenced += len(lost)
	}
	c.mu.Lock()
	rep.lockOps, rep.putOps = c.lockOps, c.putOps
	rep.Counters = c.counters
	rep.Log = c.log
	c.mu.Unlock()
	rep.Violations = c.violations()
	return rep
}

// Check runs porcupine on the report's histories (P1, and P4 at the
// built-in KV) and adds what it finds to the violations. It runs outside
// the synctest bubble: porcupine's time limit is real time, and inside the
// bubble a search that never blocks would never see it pass.
func (rep *Report) Check() {
	limit := checkTimeout
	if len(rep.Violations) > 0 {
		limit = failedCheckTimeout // the seed fails anyway; the check only adds detail
	}
	rep.lockRes = linz.Check("P1: lock history", linz.LockModel, rep.lockOps, limit)
	rep.judge(rep.lockRes)
	rep.putRes = linz.Check("P4: fenced KV history", linz.RegisterModel, rep.putOps, limit)
	rep.judge(rep.putRes)
}

// judge records what porcupine found: Illegal is a violation; Unknown (the
// time limit passed before the search decided) verified nothing and found
// nothing, and is counted and reported as undecided.
func (rep *Report) judge(r linz.Result) {
	if v := r.Violation(); v != "" {
		rep.Violations = append(rep.Violations, v)
	}
	if u := r.Undecided(); u != "" {
		rep.Counters.Undecided++
		rep.Undecided = append(rep.Undecided, u)
	}
}

// checkTimeout bounds each porcupine check; a history it cannot decide in
// time (Unknown) is reported as undecided. failedCheckTimeout
// bounds it for a seed that already failed another check.
const (
	checkTimeout       = 2 * time.Minute
	failedCheckTimeout = 10 * time.Second
)

// lockTable is W1: sessions with a long TTL kept alive, try-acquires,
// releases (sometimes with an older token of the same session, which must
// be refused), fenced puts under the held token, and linearizable reads.
func (cl *client) lockTable(stop <-chan struct{}) {
	var lease string
	var lastAck time.Time
	held := map[string]uint64{}
	old := map[string]uint64{} // an earlier token of this session per name
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(10+cl.rng.IntN(190)) * time.Millisecond):
		}
		if lease != "" && time.Since(lastAck) > cl.c.holderBound(w1TTL) {
			cl.c.sessionLost(lease, "its holder's local deadline passed without an acknowledged renewal")
			lease = "" // the local deadline passed: the session is given up
		}
		if lease == "" {
			clear(held)
			clear(old)
			lastAck = time.Now()
			if lease = cl.createSession(w1TTL); lease == "" {
				continue
			}
		}
		if time.Since(lastAck) > w1TTL/4 {
			sent := time.Now()
			if !cl.keepalive(lease, w1TTL) {
				cl.c.sessionLost(lease, "a keepalive found it gone")
				lease = ""
				continue
			}
			lastAck = sent
		}
		name := w1Names[cl.rng.IntN(len(w1Names))]
		switch p := cl.rng.IntN(10); {
		case p < 3:
			if t, out := cl.acquire(name, lease); out == linz.OutOK {
				held[name] = t
			} else if out == linz.OutExpired {
				cl.c.sessionLost(lease, "an acquire found it gone")
				lease = ""
			}
		case p < 5:
			if t, ok := held[name]; ok {
				cl.release(name, lease, t)
				delete(held, name)
				old[name] = t
			}
		case p < 6:
			if t, ok := old[name]; ok {
				cl.release(name, lease, t) // stale: must be refused (P3)
			}
		case p < 8:
			if t, ok := held[name]; ok {
				cl.put(name, t, []byte(lease))
			}
		default:
			cl.status(name)
		}
	}
}

// fencedWrites is W2: acquire with a short TTL, read-modify-write a set on
// the fenced and on the unfenced resource, sometimes pausing 1–3 TTLs
// (no keepalives) between the read and the write, then a fenced put of the
// built-in KV with the same token and a release.
func (cl *client) fencedWrites(stop <-chan struct{}, fenced, unfenced *resource) {
	var lease string
	elem := cl.id * 1_000_000
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(20+cl.rng.IntN(200)) * time.Millisecond):
		}
		if lease == "" || !cl.keepalive(lease, w2TTL) {
			if lease = cl.createSession(w2TTL); lease == "" {
				continue
			}
		}
		name := w2Names[cl.rng.IntN(len(w2Names))]
		if cl.rng.IntN(10) == 0 {
			// Wait in the queue, then give up: the session is closed while
			// it may still be queued, and must never be granted after that.
			if _, out, op := cl.acquireOrWait(name, lease, false); out == linz.OutUnknown {
				cl.closeSession(lease, op)
				lease = ""
				continue
			}
		}
		t, out := cl.acquire(name, lease)
		if out != linz.OutOK {
			if out == linz.OutExpired {
				lease = ""
			}
			continue
		}
		elem++
		set, ok := fenced.read(name, t)
		uset, _ := unfenced.read(name, t)
		if cl.rng.IntN(10) < 3 {
			time.Sleep(w2TTL + time.Duration(cl.rng.Int64N(int64(2*w2TTL))))
		}
		if !fenced.write(name, t, append(set, elem), elem) || !ok {
			cl.c.count(&cl.c.counters.StaleRejections)
		}
		unfenced.write(name, t, append(uset, elem), elem)
		cl.put(name, t, []byte(lease))
		cl.release(name, lease, t)
	}
}

// shortLease is W4, one holder of a 1 s lease (the server's shortest): it
// renews every 20–60 ms on the node that answered its last renewal (as the
// Go client's keepalive stream does), now and then takes one of two names
// its peers also try for, and stops for 1–1.25 TTL (a paused or dead
// holder; a peer may then get its name) in 1 of 100 rounds, and when the
// fault schedule freezes it (see transfer), and in 2 of 100 rounds stops
// so that its next renewal races its session's expiry.
func (cl *client) shortLease(stop <-chan struct{}) {
	var lease string
	var held bool
	name := w4Names[cl.id%len(w4Names)]
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(20+cl.rng.IntN(40)) * time.Millisecond):
		}
		if lease == "" {
			held = false
			if lease = cl.createSession(w4TTL); lease == "" {
				continue
			}
		}
		if !cl.keepalive(lease, w4TTL) {
			lease = ""
			continue
		}
		if !held && cl.rng.IntN(100) == 0 {
			switch _, out := cl.acquire(name, lease); out {
			case linz.OutOK:
				held = true
			case linz.OutExpired:
				lease = ""
				continue
			}
		}
		switch p := cl.rng.IntN(100); {
		case p == 0 || cl.c.frozen(cl.id):
			time.Sleep(w4TTL + time.Duration(cl.rng.Int64N(int64(w4TTL/4))))
		case p < 3:
			// Stop until its next renewal goes out about when the leader
			// may expire the session (TTL·(1+δ) after the last renewal on
			// the leader's clock, within a tick): a late renewal racing
			// the expiry, which the lessor must settle one way — renewed,
			// or ended — and never both.
			time.Sleep(w4TTL*90/100 + time.Duration(cl.rng.Int64N(int64(w4TTL*10/100))))
		}
	}
}

// freezeHolders freezes every W4 holder once, each after its first
// renewal past its own random instant within d from now, as a SIGSTOP of
// client processes at random moments would.
func (c *Cluster) freezeHolders(rng *rand.Rand, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range w4Holders {
		c.freezeAt[w1Clients+w2Clients+i] = time.Now().Add(time.Duration(rng.Int64N(int64(d))))
	}
}

// frozen reports, once, whether the holder id is to freeze now.
func (c *Cluster) frozen(id int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.freezeAt[id]
	if !ok || time.Now().Before(at) {
		return false
	}
	delete(c.freezeAt, id)
	return true
}

// faults runs the seed's fault schedule for the configured duration: one
// fault at a time, each healed before the next.
func (c *Cluster) faults(rng *rand.Rand) {
	end := time.Now().Add(c.cfg.Duration)
	for time.Now().Before(end) {
		time.Sleep(time.Duration(500+rng.IntN(2500)) * time.Millisecond)
		hold := time.Duration(1000+rng.IntN(5000)) * time.Millisecond
		victim := c.nodes[rng.IntN(len(c.nodes))]
		if rng.IntN(2) == 0 {
			victim = c.leaderNode(victim)
		}
		other := c.nodes[(slices.Index(c.nodes, victim)+1+rng.IntN(2))%len(c.nodes)]
		c.failoverFrom(victim)
		switch f := rng.IntN(10); f {
		case 0:
			c.logf("partition %s for %v", victim.id, hold)
			c.count(&c.counters.Partitions)
			c.isolate(victim)
		case 1:
			c.count(&c.counters.OneWayCuts)
			if rng.IntN(2) == 0 {
				c.logf("cut %s→%s for %v", victim.id, other.id, hold)
				c.net.set(func(n *network) { n.cut[[2]string{victim.id, other.id}] = true })
				break
			}
			// A leader that reaches its followers but hears nothing back
			// steps down with entries they stored and will commit.
			c.logf("cut every link into %s (requests and replies) for %v", victim.id, hold)
			c.net.set(func(n *network) { deafen(n, c.nodes, victim) })
		case 2:
			d := time.Duration(5+rng.IntN(150)) * time.Millisecond
			c.logf("delay all links up to %v for %v", d, hold)
			c.count(&c.counters.Delays)
			c.everyLink(func(n *network, k [2]string) { n.delay[k] = d })
		case 3:
			p := 0.1 + rng.Float64()*0.4
			c.logf("drop %.0f%% on all links for %v", p*100, hold)
			c.count(&c.counters.Drops)
			c.everyLink(func(n *network, k [2]string) { n.drop[k] = p })
		case 4:
			c.logf("crash %s for %v", victim.id, hold)
			c.count(&c.counters.Crashes)
			victim.crash()
		case 5:
			c.logf("power loss of every node for %v", hold)
			c.count(&c.counters.PowerLosses)
			c.failoverFrom(c.leaderNode(victim))
			for _, n := range c.nodes {
				n.crash()
			}
		case 6, 7: // twice as often as the others: only a cut-off old leader shows grace at work
			c.transfer(rng, hold)
		case 8, 9:
			hold = c.pauseNode(rng, victim)
		}
		time.Sleep(hold)
		c.heal()
	}
}

// transfer moves leadership from the leader to another node, as
// `leasehold cluster transfer-leader` and a graceful shutdown do: the
// target gets TimeoutNow and campaigns at once, and the voters grant it
// even though they know a leader. The moment the old leader's TimeoutNow
// leaves, in 4 of 8 transfers it is cut off, and in 2 of 8 every link into
// it is cut (its peers' requests and the replies to its own), so it never
// hears of its successor and keeps acknowledging renewals until its
// leader lease runs out; in 1 of 8 only its peers' requests are cut and
// its own delayed, so it learns of the new term from the first delayed
// reply; 1 of 8 is a transfer alone. Held for hold, then healed with the rest.
// Every W4 holder is frozen at a random moment of the 250 ms after the
// transfer starts.
//
// That is the interleaving the grace window exists for. The successor is
// promoted at P, within milliseconds of the TimeoutNow, while the cut-off
// old leader acknowledges renewals until its leader lease (200 ms) runs
// out after its last contact, at about P + 200 ms. A renewal it
// acknowledges was sent at s ≤ P + 200 ms, and its holder believes it
// holds until s + TTL·(1−δ) − m. The successor expires the session no
// earlier than P + G + TTL·(1+δ)/r (its clock runs at rate r ≤ 1 + 1.5 %
// of the reference clock), plus up to one tick (20 ms): with the grace
// G = 400 ms at least P + 0.4 s + 1.005·TTL, after every such holder's
// deadline. Without the grace a W4 session (TTL 1 s) whose holder
// renewed only on the old leader since P ends at P + 1.005–1.036 s (+ the
// tick) while the holder believes it holds until s + 0.88 s: an early
// expiry (P7) whenever the holder's last renewal went out more than
// 125–156 ms (+ the tick) after P, a window of 30–80 ms at the end of
// the 200 ms. A W4 holder renews every 20–60 ms and stays on its node,
// so one frozen in that window has its last renewal there.
func (c *Cluster) transfer(rng *rand.Rand, hold time.Duration) {
	old := c.leaderNode(nil)
	var r *raft.Raft
	if old != nil {
		if rn, _, ok := old.leading(); ok {
			r = rn.Raft()
		}
	}
	if r == nil {
		c.logf("no leader to transfer from")
		return
	}
	to := c.nodes[(slices.Index(c.nodes, old)+1+rng.IntN(2))%len(c.nodes)]
	var how string
	var strike func(n *network) // once the TimeoutNow passed
	switch rng.IntN(8) {
	case 0, 1, 2, 3:
		how = ", cutting " + old.id + " off"
		strike = func(n *network) { cutOff(n, c.nodes, old) }
	case 4, 5:
		how = ", cutting every link into " + old.id + " (requests and replies)"
		strike = func(n *network) { deafen(n, c.nodes, old) }
	case 6:
		d := time.Duration(5+rng.IntN(150)) * time.Millisecond
		how = fmt.Sprintf(", cutting the links into %s and delaying the ones out of it up to %v", old.id, d)
		strike = func(n *network) {
			for _, p := range c.nodes {
				if p != old {
					n.cut[[2]string{p.id, old.id}] = true
					n.delay[[2]string{old.id, p.id}] = d
				}
			}
		}
	}
	if strike != nil {
		c.net.set(func(n *network) { n.onTimeoutNow[old.id] = strike })
	}
	c.logf("transfer leadership %s→%s%s for %v", old.id, to.id, how, hold)
	c.count(&c.counters.Transfers)
	c.freezeHolders(rng, 250*time.Millisecond)
	if err := r.LeadershipTransferToServer(raft.ServerID(to.id), raft.ServerAddress(to.id)).Error(); err != nil {
		c.logf("transfer %s→%s: %v", old.id, to.id, err)
	}
}

// pauseNode pauses one node's process (the leader in 3 of 4 pauses) for
// longer than the W4 TTL plus two election timeouts and the grace, and
// returns the pause's length: the fault is healed, and the node resumed,
// when it ends. A paused leader keeps believing it leads; the others elect
// a successor, which expires the sessions nobody renewed with it and
// grants their names again, while renewals and reads sent to the paused
// node queue there. For the whole pause and 300 ms after it, the W4
// holders reach only the paused leader (as holders whose only path to the
// cluster is that node's), so their renewals queue there and are answered
// when it resumes, before it hears of its successor: a resumed leader that
// renews from memory acknowledges renewals of sessions its successor
// already expired (P7), and one that reads from memory answers a read
// without the writes its successor acknowledged (P1).
func (c *Cluster) pauseNode(rng *rand.Rand, victim *node) time.Duration {
	leader := c.leaderNode(nil)
	if leader != nil && rng.IntN(4) != 0 {
		victim = leader
	}
	d := w4TTL + 2*c.cfg.ElectionTimeout + 2*c.cfg.LeaderLease + time.Duration(rng.Int64N(int64(2*time.Second)))
	c.logf("pause %s for %v", victim.id, d)
	c.count(&c.counters.Pauses)
	if victim == leader {
		c.mu.Lock()
		c.pinned, c.pinnedUntil = victim, time.Now().Add(d+300*time.Millisecond)
		c.mu.Unlock()
	}
	victim.freeze()
	return d
}

// pinnedTo returns the node the W4 holders reach only, or nil.
func (c *Cluster) pinnedTo() *node {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pinned != nil && time.Now().After(c.pinnedUntil) {
		c.pinned = nil
	}
	return c.pinned
}

// deafen cuts every link into v: its peers' requests and the replies to
// its own requests, which still arrive.
func deafen(n *network, nodes []*node, v *node) {
	n.deaf[v.id] = true
	for _, p := range nodes {
		if p != v {
			n.cut[[2]string{p.id, v.id}] = true
		}
	}
}

func (c *Cluster) isolate(v *node) {
	c.net.set(func(n *network) { cutOff(n, c.nodes, v) })
}

// cutOff cuts every link of v, both directions.
func cutOff(n *network, nodes []*node, v *node) {
	for _, p := range nodes {
		if p != v {
			n.cut[[2]string{v.id, p.id}] = true
			n.cut[[2]string{p.id, v.id}] = true
		}
	}
}

func (c *Cluster) everyLink(f func(n *network, k [2]string)) {
	c.net.set(func(n *network) {
		for _, a := range c.nodes {
			for _, b := range c.nodes {
				if a != b {
					f(n, [2]string{a.id, b.id})
				}
			}
		}
	})
}

// leaderNode returns the node that leads now, or def.
func (c *Cluster) leaderNode(def *node) *node {
	for _, n := range c.nodes {
		if _, _, ok := n.leading(); ok {
			return n
		}
	}
	return def
}

// failoverFrom starts a failover clock when the victim is the leader.
func (c *Cluster) failoverFrom(v *node) {
	if _, _, ok := v.leading(); !ok {
		return
	}
	c.mu.Lock()
	c.healedAt = time.Now()
	c.mu.Unlock()
}

// heal removes every network fault, resumes a paused node and restarts
// crashed nodes.
func (c *Cluster) heal() {
	c.net.heal()
	for _, n := range c.nodes {
		n.pause.thaw()
	}
	restarted := false
	for _, n := range c.nodes {
		n.mu.Lock()
		up := n.up
		n.mu.Unlock()
		if !up {
			if err := n.start(); err != nil {
				c.violate("P8", "restart %s: %v", n.id, err)
			}
			restarted = true
		}
	}
	if restarted {
		c.connect()
	}
	c.logf("healed")
}

// liveness checks P8 after the final heal: a leader within three election
// timeouts, then every name granted to a fresh session within
// TTL·(1+drift) + grace + 1 s of the leader (the workload's holders are
// gone and no longer renew).
func (c *Cluster) liveness() {
	healed := time.Now()
	cl := &client{c: c, id: 99, rng: rand.New(rand.NewPCG(c.cfg.Seed, 3))}
	for c.leaderNode(nil) == nil {
		if time.Since(healed) > 3*2*c.cfg.ElectionTimeout {
			c.violate("P8", "no leader %v after healing: %s", time.Since(healed), c.describe())
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	led := time.Now()
	bound := w1TTL + time.Duration(float64(w1TTL)*c.cfg.Drift) + 2*c.cfg.LeaderLease + time.Second
	lease := cl.createSession(time.Minute)
	for _, name := range append(slices.Clone(w1Names), w2Names...) {
		for {
			if lease == "" {
				lease = cl.createSession(time.Minute)
			}
			if _, out := cl.acquire(name, lease); out == linz.OutOK {
				break
			}
			if time.Since(led) > bound+3*opTimeout {
				c.violate("P8", "%q not granted %v after a leader was elected: %s", name, time.Since(led), c.describe())
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
