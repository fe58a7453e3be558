//go:build leasehold_sim

package sim

import (
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/harness/linz"
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
