//go:build leasehold_sim

package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leasehold/leasehold/internal/harness/linz"
)

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
