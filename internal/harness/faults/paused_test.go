//go:build leasehold_faults

package faults

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
)

// Timing of TestPausedLeaderQueues. A lessor renews a session from memory
// only while it has not checkpointed it, which it does once the session
// went unrenewed for 2/5 of its TTL; the pause plus the keepalive interval
// stays below that (5 s + 0.5 s < 6 s), so every holder's session is one
// a resumed leader would renew from memory. The pause outlasts an
// election (≤ 1 s) by enough that the renewals still queued at the
// resume were sent well after the successor's promotion: a renewal the
// resumed process acknowledged moves the holder's deadline past the
// moment the successor expires the session, by up to the pause minus the
// election, the grace and 4 % of the TTL.
const (
	pausedRounds    = 3
	pausedHolders   = 60
	pausedTTL       = 15 * time.Second
	pausedKeepAlive = 500 * time.Millisecond
	pausedWriters   = 16 // holders that write their name's KV key in a loop
	pauseLength     = 5 * time.Second
	cutAfter        = 300 * time.Millisecond // from the resume to the holders' cut
)

// pausedNames are the names the workers of TestPausedLeaderQueues take
// and write through the other nodes, and the reader reads at the leader.
var pausedNames = []string{"p:w0", "p:w1"}

// TestPausedLeaderQueues: a paused leader with renewals, writes and reads
// queued at it, three rounds on one cluster. Holders (one Client each)
// reach only the leader, through a proxy of the test, and renew every
// 500 ms; some of them write their name's KV key with their token in a
// loop, and workers take, write and release pausedNames through the other
// nodes. The leader is SIGSTOPped for 5 s while renewals, writes and
// linearizable reads (KV get, status) of pausedNames are in flight to it
// on connections opened before the pause; a waiter for every held name
// queues through the successor once it leads; reads go on for 500 ms
// after the SIGCONT, and 300 ms after it the proxy closes, so that only
// renewals the resumed process answered count. On the test's clock,
// every holder's end (its Done, or its local safe deadline if earlier)
// must precede the grant of its name to its waiter; the reads join the
// history that P4 (tokens) and porcupine (the lock table) check.
func TestPausedLeaderQueues(t *testing.T) {
	c := startCluster(t)
	ctx := t.Context()
	o := observe(c.endpoints(), "p:", pausedNames)
	var cnt counters
	var procs []*proc
	var mine, reads, statuses []rec
	keys := append([]string(nil), pausedNames...)
	for round := range pausedRounds {
		// A round whose set-up the cluster spoils (the leader moves before
		// the pause, as it may on a loaded machine) is set up again.
		for attempt := 0; ; attempt++ {
			r, ok := pausedRound(ctx, t, c, fmt.Sprintf("r%d.%d", round, attempt))
			procs = append(procs, r.workers...)
			mine = append(mine, r.recs...)
			reads = append(reads, r.reads...)
			statuses = append(statuses, r.statuses...)
			keys = append(keys, r.written...)
			if ok {
				cnt.failover = append(cnt.failover, r.failover)
				break
			}
			if attempt == 2 {
				t.Fatalf("round %d: the leader did not stay put through three set-ups", round)
			}
		}
	}
	waitAll(t, procs, 20*time.Second)
	h := collect(t, o, c.endpoints(), keys, procs, mine...)
	h.reads = append(h.reads, reads...)
	h.status = append(h.status, statuses...)
	cnt.snapshotInstalls = c.snapshotInstalls()
	report(t, h, &cnt, o, "leader-changes", "expiries")
}

// holder is one session of a pausedRound holding one name through the
// leader alone.
type holder struct {
	name   string
	token  uint64
	cl     *client.Client
	s      *client.Session
	before time.Time // its local safe deadline as the pause began
	ended  chan struct{}
	doneAt time.Time // when its Lock's Done was seen closed; set before ended closes
}

// end is the moment the holder stopped believing it held its name: Done,
// or its local safe deadline if that came first (Done is closed by a
// timer that may run late on a loaded machine).
func (h *holder) end() time.Time {
	if d := h.s.Deadline(); d.Before(h.doneAt) {
		return d
	}
	return h.doneAt
}

// roundResult is what one pausedRound did, for the history.
type roundResult struct {
	failover              time.Duration
	workers               []*proc
	recs, reads, statuses []rec
	written               []string // the KV keys the holders wrote
}

// pausedRound runs one round of TestPausedLeaderQueues (tag names it) on
// the current leader and checks its holders' ends against their waiters'
// grants. It reports false, with what it did until then, when the set-up
// failed before the pause: the round must be set up again.
func pausedRound(ctx context.Context, t *testing.T, c *cluster, tag string) (res roundResult, ok bool) {
	t.Helper()
	var mu sync.Mutex // protects res's records
	add := func(to *[]rec, r rec) {
		mu.Lock()
		*to = append(*to, r)
		mu.Unlock()
	}
	leader, _ := c.awaitLeader(ctx, c.nodes, 4*leaderBound) // set-up: not a failover
	rest := others(c, leader)
	px, err := newProxy(leader.id, leader.apiAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer px.close()
	prefix := "p:" + tag + "-"

	// Workers acquire, write and release the workers' names through the
	// other nodes, before the pause and, through the successor, during it.
	until := time.Now().Add(4*time.Second + pauseLength + 2*time.Second)
	for i, name := range pausedNames {
		res.workers = append(res.workers, spawn(t, "worker", fmt.Sprintf("%s-w%d", tag, i), c.endpoints(leader), []string{name}, workerTTL, until))
	}

	holders := make([]*holder, pausedHolders)
	for i := range holders {
		h := &holder{name: fmt.Sprintf("%sh%d", prefix, i), ended: make(chan struct{})}
		holders[i] = h
		h.cl, err = client.Dial(ctx, px.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer h.cl.Close()
		h.s, err = h.cl.NewSession(ctx, client.WithTTL(pausedTTL), client.WithKeepAliveInterval(pausedKeepAlive), client.WithOwner("holder"))
		if err != nil {
			t.Logf("round %s: holder %d: %v; setting the round up again", tag, i, err)
			return res, false
		}
		sent := time.Now()
		l, err := h.s.Acquire(ctx, h.name)
		if err != nil {
			res.recs = append(res.recs, rec{K: "error", Op: "acquire", Proc: prefix + fmt.Sprintf("holder%d", i), Name: h.name, Lease: h.s.ID(), Code: codeOf(err), Msg: err.Error(), Sent: sent.UnixNano(), Ret: time.Now().UnixNano()})
			t.Logf("round %s: holder %d: %v; setting the round up again", tag, i, err)
			return res, false
		}
		h.token = l.Token()
		res.recs = append(res.recs, rec{K: "grant", Proc: prefix + fmt.Sprintf("holder%d", i), Name: h.name, Lease: l.LeaseID(), Token: l.Token(), Sent: sent.UnixNano(), Ret: time.Now().UnixNano()})
		go func() {
			<-l.Done()
			h.doneAt = time.Now()
			close(h.ended)
		}()
	}

	// The reader's connection to the leader is opened before the pause.
	reader, err := client.Dial(ctx, leader.apiAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if _, err := reader.Status(ctx, pausedNames[0]); err != nil {
		t.Logf("round %s: the reader's first status read: %v; setting the round up again", tag, err)
		return res, false
	}
	var reading sync.WaitGroup
	nread := 0
	read := func() {
		name := pausedNames[nread%len(pausedNames)]
		proc := fmt.Sprintf("%sreader%d", prefix, nread)
		nread++
		reading.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, pauseLength+5*time.Second)
			defer cancel()
			sent := time.Now()
			v, tok, err := reader.KVGet(rctx, name)
			if err == nil {
				add(&res.reads, rec{K: "read", Proc: proc, Name: name, Token: tok, Value: string(v), Sent: sent.UnixNano(), Ret: time.Now().UnixNano()})
			}
			sent = time.Now()
			info, err := reader.Status(rctx, name)
			if err == nil {
				r := rec{K: "status", Proc: proc, Name: name, Sent: sent.UnixNano(), Ret: time.Now().UnixNano()}
				if hd := info.GetHolder(); hd != nil {
					r.Lease, r.Token = hd.GetLeaseId(), hd.GetToken()
				}
				add(&res.statuses, r)
			}
		})
	}
	// Some holders write with their token through the leader until the
	// cut: proposals are in flight at the pause, and more queue during it.
	cutCh := make(chan struct{})
	var writing sync.WaitGroup
	for i, h := range holders[:pausedWriters] {
		res.written = append(res.written, h.name)
		writing.Go(func() {
			w := &recorder{proc: prefix + fmt.Sprintf("holder%d", i)}
			for k := 0; ; k++ {
				select {
				case <-cutCh:
					return
				case <-h.ended:
					return
				default:
				}
				r := w.put(ctx, h.cl, h.name, fmt.Sprintf("%s-%d", w.proc, k), h.token)
				add(&res.recs, r)
				if r.Code != "" {
					select {
					case <-cutCh:
					case <-time.After(50 * time.Millisecond):
					}
				}
			}
		})
	}
	time.Sleep(2 * time.Second) // the workers' and holders' writes and the holders' renewals run

	// Still the leader (a metrics read may fail on a loaded machine).
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		l := c.leader(ctx, c.nodes)
		if l == leader {
			break
		}
		if l != nil || time.Since(start) > 3*time.Second {
			t.Logf("round %s: the leader moved from %s before the pause; setting the round up again", tag, leader.id)
			close(cutCh)
			writing.Wait()
			return res, false
		}
	}
	for _, h := range holders {
		h.before = h.s.Deadline()
	}
	c.signal(leader, syscall.SIGSTOP)
	paused := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	stopReads := make(chan struct{})
	readsDone := make(chan struct{})
	go func() { // reads queue at the paused leader every 100 ms
		defer close(readsDone)
		for {
			select {
			case <-stopReads:
				return
			case <-tick.C:
				read()
			}
		}
	}()
	_, res.failover = c.awaitLeader(ctx, rest, leaderBound)

	// A waiter for every held name, queued through the successor.
	waiters, err := client.Dial(ctx, c.endpoints(leader))
	if err != nil {
		t.Fatal(err)
	}
	defer waiters.Close()
	granted := make([]time.Time, len(holders))
	var waiting sync.WaitGroup
	for i, h := range holders {
		waiting.Go(func() {
			proc := prefix + fmt.Sprintf("waiter%d", i)
			// Each leader change before the successor checkpoints a
			// session restarts its TTL (see package lessor): on a loaded
			// machine leadership may move again after the resume.
			stop := time.Now().Add(pauseLength + 2*regrantBound(pausedTTL))
			var s *client.Session
			defer func() {
				if s != nil {
					cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					_ = s.Close(cctx)
					cancel()
				}
			}()
			for time.Now().Before(stop) && ctx.Err() == nil {
				actx, cancel := context.WithDeadline(ctx, stop)
				sent := time.Now()
				if s == nil || s.Err() != nil {
					var err error
					if s, err = waiters.NewSession(actx, client.WithTTL(20*time.Second), client.WithOwner("waiter")); err != nil {
						s = nil
						cancel()
						continue
					}
				}
				l, err := s.Acquire(actx, h.name)
				ret := time.Now()
				cancel()
				if err == nil {
					granted[i] = ret
					add(&res.recs, rec{K: "grant", Proc: proc, Name: h.name, Lease: l.LeaseID(), Token: l.Token(), Sent: sent.UnixNano(), Ret: ret.UnixNano()})
					return
				}
				add(&res.recs, rec{K: "error", Op: "acquire", Proc: proc, Name: h.name, Lease: s.ID(), Code: codeOf(err), Msg: err.Error(), Sent: sent.UnixNano(), Ret: ret.UnixNano()})
			}
		})
	}

	time.Sleep(time.Until(paused.Add(pauseLength)))
	close(stopReads)
	<-readsDone
	readsDone = make(chan struct{})
	c.signal(leader, syscall.SIGCONT)
	resumed := time.Now()
	go func() { // reads right after the resume
		defer close(readsDone)
		for time.Since(resumed) < 500*time.Millisecond {
			read()
			time.Sleep(10 * time.Millisecond)
		}
	}()
	time.Sleep(time.Until(resumed.Add(cutAfter)))
	cut := time.Now()
	px.close()
	close(cutCh)
	writing.Wait()
	<-readsDone
	t.Logf("round %s: %s paused %v (resumed at %s), a successor in %v, %d reads queued or sent after the resume; holders cut %v after the resume",
		tag, leader.id, resumed.Sub(paused).Round(time.Millisecond), resumed.UTC().Format("15:04:05.000"), res.failover.Round(time.Millisecond), nread, cut.Sub(resumed).Round(time.Millisecond))

	for i, h := range holders {
		select {
		case <-h.ended:
		case <-time.After(time.Until(cut.Add(pausedTTL + slack))):
			t.Fatalf("round %s: holder %d still holds %s %v after its link was cut (deadline %v after the cut)", tag, i, h.name, time.Since(cut), h.s.Deadline().Sub(cut))
		}
	}
	waiting.Wait()
	reading.Wait()

	// Every holder's end precedes its waiter's grant.
	type margin struct {
		h       *holder
		d       time.Duration // grant − end
		end, gr time.Duration // since the pause
	}
	var bad []margin
	moved, queued := 0, 0
	for i, h := range holders {
		if d := h.s.Deadline(); d.After(h.before) {
			moved++
			// The renewal that set d was sent TTL·(1−drift) − margin before it.
			if d.Add(-pausedTTL + time.Duration(float64(pausedTTL)*0.02) + 100*time.Millisecond).Before(resumed) {
				queued++
			}
		}
		if granted[i].IsZero() {
			t.Errorf("round %s: the waiter for %s was not granted it", tag, h.name)
			continue
		}
		if d := granted[i].Sub(h.end()); d < 0 {
			bad = append(bad, margin{h, d, h.end().Sub(paused), granted[i].Sub(paused)})
		}
	}
	t.Logf("round %s: %d of %d holders' deadlines moved after the pause began, %d of them by a renewal sent before the resume", tag, moved, len(holders), queued)
	sort.Slice(bad, func(i, j int) bool { return bad[i].d < bad[j].d })
	for k, b := range bad {
		if k == 10 {
			t.Errorf("round %s: … and %d more", tag, len(bad)-k)
			break
		}
		t.Errorf("round %s: two holders of %s: the holder's Done came %v after its waiter was granted the name (margin %v; since the pause: grant %v, Done %v)",
			tag, b.h.name, -b.d.Round(time.Millisecond), b.d.Round(time.Millisecond), b.gr.Round(time.Millisecond), b.end.Round(time.Millisecond))
	}
	if len(bad) > 0 {
		t.Errorf("round %s: %d of %d holders still held their name after it was granted to another session; smallest margin %v",
			tag, len(bad), len(holders), bad[0].d.Round(time.Millisecond))
	}
	return res, true
}
