//go:build leasehold_faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
)

// Bounds of P8 with the slack a loaded 2-core machine needs: a leader
// within 3 election timeouts of the heal; a dead holder's name granted
// again within TTL·(1+drift) + grace + 1 s of its death.
const slack = 2 * time.Second

var leaderBound = 3*electionTimeout + slack

func regrantBound(ttl time.Duration) time.Duration {
	return ttl + time.Duration(float64(ttl)*drift) + grace + time.Second + slack
}

const workerTTL = 2 * time.Second

var names = []string{"f:0", "f:1", "f:2"}

// load starts n worker processes on names until until.
func load(t *testing.T, c *cluster, n int, until time.Time) []*proc {
	var ps []*proc
	for i := range n {
		ps = append(ps, spawn(t, "worker", fmt.Sprintf("w%d", i), c.endpoints(), names, workerTTL, until))
	}
	return ps
}

// waitAll waits for every process of ps to stop by itself, each within
// `within` but at least 10 s from the call: on a loaded machine a schedule
// can run past its clients' until, and the wait must not go negative.
func waitAll(t *testing.T, ps []*proc, within time.Duration) {
	within = max(within, 10*time.Second)
	for _, p := range ps {
		p.wait(t, within)
	}
}

// snapshotInstalls counts the snapshots the nodes installed from a leader.
func (c *cluster) snapshotInstalls() int {
	n := 0
	for _, nd := range c.nodes {
		b, _ := os.ReadFile(nd.logPath)
		n += strings.Count(string(b), "Installed remote snapshot")
	}
	return n
}

func others(c *cluster, n *node) []*node {
	var out []*node
	for _, o := range c.nodes {
		if o != n {
			out = append(out, o)
		}
	}
	return out
}

func (c *cluster) mustLeader(ctx context.Context) *node {
	c.t.Helper()
	l, _ := c.awaitLeader(ctx, c.nodes, leaderBound)
	return l
}

// Schedule 1: SIGKILL of the leader under load, three times; the killed
// node restarts on its data dir each time.
func TestKillLeader(t *testing.T) {
	c := startCluster(t)
	ctx := t.Context()
	o := observe(c.endpoints(), "f:", names)
	var cnt counters
	until := time.Now().Add(18 * time.Second)
	ps := load(t, c, 4, until)
	for range 3 {
		time.Sleep(2 * time.Second) // load before the fault
		leader := c.mustLeader(ctx)
		c.kill(leader)
		_, took := c.awaitLeader(ctx, others(c, leader), leaderBound)
		cnt.failover = append(cnt.failover, took)
		c.start(leader)
		c.waitReady(leader, 20*time.Second)
	}
	waitAll(t, ps, time.Until(until)+10*time.Second)
	h := collect(t, o, c.endpoints(), names, ps)
	cnt.snapshotInstalls = c.snapshotInstalls()
	report(t, h, &cnt, o, "leader-changes")
}

// Schedule 2: SIGSTOP of the leader for 3 s (longer than the election
// timeout), then SIGCONT, twice. A session whose TTL covers the election
// (P10) keeps its lock throughout.
func TestPauseLeader(t *testing.T) {
	c := startCluster(t)
	ctx := t.Context()
	o := observe(c.endpoints(), "f:", names)
	var cnt counters
	cl, err := client.Dial(ctx, c.endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	long, err := cl.NewSession(ctx, client.WithTTL(5*time.Second), client.WithOwner("long"))
	if err != nil {
		t.Fatal(err)
	}
	held, err := long.Acquire(ctx, "f:long")
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(16 * time.Second)
	ps := load(t, c, 4, until)
	for range 2 {
		time.Sleep(2 * time.Second)
		leader := c.mustLeader(ctx)
		c.signal(leader, syscall.SIGSTOP)
		paused := time.Now()
		_, took := c.awaitLeader(ctx, others(c, leader), leaderBound)
		cnt.failover = append(cnt.failover, took)
		if rest := 3*time.Second - time.Since(paused); rest > 0 {
			time.Sleep(rest) // the pause lasts 3 s
		}
		c.signal(leader, syscall.SIGCONT)
	}
	waitAll(t, ps, time.Until(until)+10*time.Second)
	select {
	case <-held.Done():
		t.Errorf("P10: the 5 s session lost its lock across the paused leaders: %v", context.Cause(held.Context()))
	default:
	}
	if err := long.Close(ctx); err != nil {
		t.Error(err)
	}
	h := collect(t, o, c.endpoints(), names, ps)
	cnt.snapshotInstalls = c.snapshotInstalls()
	report(t, h, &cnt, o, "leader-changes")
}

// Schedule 3: the leader is cut off from the other nodes (both ways, raft
// and API; clients still reach it) for 5 s under load, then healed. The
// nodes snapshot every 64 entries, so the old leader catches up by a
// snapshot install.
func TestPartitionLeader(t *testing.T) {
	c := startCluster(t, "LEASEHOLD_TESTHOOK_SNAPSHOT_THRESHOLD=16")
	ctx := t.Context()
	keys := append([]string{"f:majority"}, names...)
	o := observe(c.endpoints(), "f:", keys)
	var cnt counters
	until := time.Now().Add(16 * time.Second)
	ps := load(t, c, 4, until)
	time.Sleep(2 * time.Second)
	leader := c.mustLeader(ctx)
	c.partition(leader)
	cut := time.Now()
	_, took := c.awaitLeader(ctx, others(c, leader), leaderBound)
	cnt.failover = append(cnt.failover, took)
	// Writes on the majority side while the cut lasts (5 s), so that the
	// old leader falls behind the others' snapshots.
	mine := writeFor(ctx, t, c.endpoints(leader), "f:majority", 5*time.Second-time.Since(cut))
	c.heal(leader)
	healed := time.Now()
	_, took = c.awaitLeader(ctx, c.nodes, leaderBound)
	t.Logf("a leader %v after the heal", took.Round(time.Millisecond))
	// The old leader catches up (P5) by a snapshot install.
	for time.Since(healed) < 10*time.Second && c.snapshotInstalls() == 0 {
		time.Sleep(50 * time.Millisecond)
	}
	waitAll(t, ps, time.Until(until)+10*time.Second)
	h := collect(t, o, c.endpoints(), keys, ps, mine...)
	cnt.snapshotInstalls = c.snapshotInstalls()
	report(t, h, &cnt, o, "leader-changes", "snapshot-installs")
}

// writeFor holds name through eps and writes its KV key with the token
// for d, returning what it did as records.
func writeFor(ctx context.Context, t *testing.T, eps, name string, d time.Duration) []rec {
	t.Helper()
	stop := time.Now().Add(d)
	return writeUntil(ctx, t, eps, name, "majority", 0, func() bool { return !time.Now().Before(stop) })
}

// Schedule 4: faults of client processes holding locks. A holder paused
// past its TTL resumes and writes with its old token after a newer holder
// wrote: the fence refuses it. A killed holder's name is granted again
// within TTL + grace + 1 s.
func TestClientFaults(t *testing.T) {
	c := startCluster(t)
	ctx := t.Context()
	keys := append([]string{"f:paused", "f:killed"}, names...)
	o := observe(c.endpoints(), "f:", keys)
	var cnt counters
	until := time.Now().Add(18 * time.Second)
	ps := load(t, c, 2, until)
	paused := spawn(t, "holder", "paused", c.endpoints(), []string{"f:paused"}, workerTTL, until)
	killed := spawn(t, "holder", "killed", c.endpoints(), []string{"f:killed"}, workerTTL, until)
	isGrant := func(x rec) bool { return x.K == "grant" }
	old := paused.awaitRecord(t, 10*time.Second, isGrant)
	killed.awaitRecord(t, 10*time.Second, isGrant)
	paused.awaitRecord(t, 5*time.Second, func(x rec) bool { return x.K == "put" && x.Code == "" })

	cl, err := client.Dial(ctx, c.endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var mine []rec // the test's own operations, checked with the rest
	newHolder := func(name string) (*client.Session, *client.Lock, time.Duration) {
		s, err := cl.NewSession(ctx, client.WithTTL(5*time.Second), client.WithOwner("test"))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		l, err := s.Acquire(actx, name)
		if err != nil {
			t.Fatalf("acquire %s: %v", name, err)
		}
		mine = append(mine, rec{K: "grant", Proc: "test", Name: name, Lease: l.LeaseID(), Token: l.Token(), Sent: start.UnixNano(), Ret: time.Now().UnixNano()})
		return s, l, time.Since(start)
	}

	// The paused holder.
	paused.signal(t, syscall.SIGSTOP)
	s1, l1, _ := newHolder("f:paused")
	sent := time.Now()
	if err := cl.KVPut(ctx, "f:paused", []byte("test-paused"), l1.Token(), false); err != nil {
		t.Fatalf("the new holder's write: %v", err)
	}
	mine = append(mine, rec{K: "put", Proc: "test", Name: "f:paused", Token: l1.Token(), Value: "test-paused", Sent: sent.UnixNano(), Ret: time.Now().UnixNano()})
	resumed := time.Now()
	paused.signal(t, syscall.SIGCONT)
	// Its first write after the pause that the cluster answered (a broken
	// connection may fail one first).
	refused := paused.awaitRecord(t, 10*time.Second, func(x rec) bool {
		return x.K == "put" && x.Sent > resumed.UnixNano() && (x.Code == "" || x.Code == "stale-token")
	})
	if refused.Code != "stale-token" || refused.Token != old.Token {
		t.Errorf("P3/P4: the resumed holder's first write after the pause with token %d: %s %s, want stale-token", old.Token, refused.Code, refused.Msg)
	}

	// The killed holder.
	killed.signal(t, syscall.SIGKILL)
	s2, l2, took := newHolder("f:killed")
	t.Logf("a killed holder's name granted again %v after its SIGKILL (TTL %v)", took.Round(time.Millisecond), workerTTL)
	if took > regrantBound(workerTTL) {
		t.Errorf("P8: the killed holder's name was granted again after %v, want within %v", took, regrantBound(workerTTL))
	}
	sent = time.Now()
	if err := cl.KVPut(ctx, "f:killed", []byte("test-killed"), l2.Token(), false); err != nil {
		t.Fatalf("the new holder's write: %v", err)
	}
	mine = append(mine, rec{K: "put", Proc: "test", Name: "f:killed", Token: l2.Token(), Value: "test-killed", Sent: sent.UnixNano(), Ret: time.Now().UnixNano()})
	for _, s := range []*client.Session{s1, s2} {
		if err := s.Close(ctx); err != nil {
			t.Error(err)
		}
	}

	waitAll(t, append(ps, paused), time.Until(until)+10*time.Second)
	_ = killed.cmd.Wait()
	h := collect(t, o, c.endpoints(), keys, append(ps, paused, killed), mine...)
	cnt.snapshotInstalls = c.snapshotInstalls()
	report(t, h, &cnt, o, "expiries", "stale-token")
}

// Schedule 5: every node is SIGKILLed at once under load and restarted on
// its data dir: every acknowledged write and token survives.
func TestWholeClusterCrash(t *testing.T) {
	c := startCluster(t)
	ctx := t.Context()
	o := observe(c.endpoints(), "f:", names)
	var cnt counters
	until := time.Now().Add(14 * time.Second)
	ps := load(t, c, 4, until)
	time.Sleep(3 * time.Second)
	crashed := time.Now()
	for _, n := range c.nodes {
		c.kill(n)
	}
	for _, n := range c.nodes {
		c.start(n)
	}
	_, took := c.awaitLeader(ctx, c.nodes, 20*time.Second+leaderBound) // includes the processes' start
	cnt.failover = append(cnt.failover, took)
	waitAll(t, ps, time.Until(until)+10*time.Second)
	h := collect(t, o, c.endpoints(), names, ps)
	before, after := 0, 0
	for _, r := range h.recs {
		if r.K == "grant" && r.Ret < crashed.UnixNano() {
			before++
		} else if r.K == "grant" && r.Sent > crashed.UnixNano() {
			after++
		}
	}
	t.Logf("grants acknowledged before the crash %d, requested after it %d", before, after)
	if before == 0 || after == 0 {
		t.Errorf("the load did not span the crash (%d grants before, %d after)", before, after)
	}
	cnt.snapshotInstalls = c.snapshotInstalls()
	report(t, h, &cnt, o)
}

// Schedule 6: every node's lease clock runs fast. Within the drift bound
// (1.5 % against 2 %) no lease ends before the holder's safe deadline
// (P7); beyond it (25 %) leases end early, and every other property still
// holds.
func TestClockSkew(t *testing.T) {
	for _, tc := range []struct {
		name string
		rate float64
	}{{"within", 1.015}, {"beyond", 1.25}} {
		t.Run(tc.name, func(t *testing.T) {
			c := startCluster(t, fmt.Sprintf("LEASEHOLD_TESTHOOK_CLOCK_RATE=%g", tc.rate))
			ctx := t.Context()
			keys := names
			o := observe(c.endpoints(), "f:", keys)
			var cnt counters
			until := time.Now().Add(12 * time.Second)
			ps := load(t, c, 2, until)
			cl, err := client.Dial(ctx, c.endpoints())
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			var mine []rec
			for i := range 3 {
				early, grant := probeExpiry(ctx, t, cl, fmt.Sprintf("f:skew-%d", i))
				mine = append(mine, grant...)
				if early > 0 {
					cnt.earlyExpiries++
					t.Logf("probe %d: the name was granted again %v before the first holder's safe deadline", i, early.Round(time.Millisecond))
				} else {
					t.Logf("probe %d: the name was granted again %v after the first holder's safe deadline", i, -early.Round(time.Millisecond))
				}
			}
			waitAll(t, ps, time.Until(until)+10*time.Second)
			h := collect(t, o, c.endpoints(), keys, ps, mine...)
			cnt.snapshotInstalls = c.snapshotInstalls()
			if tc.rate <= 1+drift {
				if cnt.earlyExpiries > 0 {
					t.Errorf("P7: %d of 3 leases ended before their holder's safe deadline with the clocks %g× fast, within the drift bound", cnt.earlyExpiries, tc.rate)
				}
				report(t, h, &cnt, o, "expiries")
			} else {
				report(t, h, &cnt, o, "expiries", "early-expiries")
			}
		})
	}
}

// probeTTL is the TTL of probeExpiry's sessions: at 25 % skew their lease
// ends about 440 ms before the holder's safe deadline, far more than a
// loaded machine's polling delay.
const probeTTL = 3 * time.Second

// probeExpiry holds name in a session of TTL probeTTL, lets it renew for
// 1.5 s, stops its keepalives and polls with TryAcquire until another
// session gets the name. It returns how long before the first session's
// safe deadline (sent(last acknowledged renewal) + TTL·(1−drift) − 100 ms)
// the second grant was acknowledged (≤ 0: not early), and both grants.
func probeExpiry(ctx context.Context, t *testing.T, cl *client.Client, name string) (time.Duration, []rec) {
	t.Helper()
	s, err := cl.NewSession(ctx, client.WithTTL(probeTTL), client.WithOwner("probe"))
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	l, err := s.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	grants := []rec{{K: "grant", Proc: "probe", Name: name, Lease: l.LeaseID(), Token: l.Token(), Sent: sent.UnixNano(), Ret: time.Now().UnixNano()}}
	time.Sleep(1500 * time.Millisecond) // between two renewals (every TTL/3)
	s.Orphan()
	deadline := s.Deadline()
	other, err := cl.NewSession(ctx, client.WithTTL(5*time.Second), client.WithOwner("probe-next"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Close(ctx) }()
	stop := time.Now().Add(10 * time.Second)
	for time.Now().Before(stop) {
		sent := time.Now()
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		l2, err := other.TryAcquire(tctx, name)
		cancel()
		if err == nil {
			acked := time.Now()
			grants = append(grants, rec{K: "grant", Proc: "probe", Name: name, Lease: l2.LeaseID(), Token: l2.Token(), Sent: sent.UnixNano(), Ret: acked.UnixNano()})
			return deadline.Sub(acked), grants
		}
		if !errors.Is(err, client.ErrLocked) && !errors.Is(err, client.ErrLockDelay) {
			grants = append(grants, rec{K: "error", Proc: "probe", Op: "try-acquire", Name: name, Code: codeOf(err), Msg: err.Error(), Sent: sent.UnixNano(), Ret: time.Now().UnixNano()})
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s was not granted again within 10 s of its holder's orphaning", name)
	return 0, nil
}
