package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "leasehold-e2e-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "leasehold")
	out, err := exec.Command("go", "build", "-o", binary, "../../../cmd/leasehold").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build leasehold: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type proc struct {
	id, api, raft, dir string
	cmd                *exec.Cmd
	log                *os.File
}

func (p *proc) start(t *testing.T, bootstrap string, extra ...string) {
	t.Helper()
	args := []string{"serve", "--node-id", p.id, "--listen", p.api, "--raft-addr", p.raft, "--data", p.dir}
	if bootstrap != "" {
		args = append(args, "--bootstrap", bootstrap)
	}
	args = append(args, extra...)
	p.cmd = exec.Command(binary, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
}

func (p *proc) kill() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()
		p.cmd = nil
	}
}

// newProcs describes n nodes n1..nN on free 127.0.0.1 ports, each with a
// data dir and a log file; none is started.
func newProcs(t *testing.T, n int) []*proc {
	t.Helper()
	var procs []*proc
	ports := servertest.FreePorts(t, 2*n)
	for i := range n {
		p := &proc{id: fmt.Sprintf("n%d", i+1), api: fmt.Sprintf("127.0.0.1:%d", ports[2*i]), raft: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1]), dir: t.TempDir()}
		f, err := os.Create(filepath.Join(t.TempDir(), p.id+".log"))
		if err != nil {
			t.Fatal(err)
		}
		p.log = f
		procs = append(procs, p)
	}
	return procs
}

func startCluster(t *testing.T, n int) []*proc {
	t.Helper()
	return startClusterWith(t, n, http.DefaultClient, "http://")
}

// startClusterWith starts n nodes with extra serve flags and waits until each answers
// scheme+api/healthz through hc.
func startClusterWith(t *testing.T, n int, hc *http.Client, scheme string, extra ...string) []*proc {
	t.Helper()
	procs := newProcs(t, n)
	var boot []string
	for _, p := range procs {
		boot = append(boot, p.id+"="+p.raft)
	}
	for _, p := range procs {
		p.start(t, strings.Join(boot, ","), extra...)
	}
	stopAtEnd(t, procs)
	for _, p := range procs {
		waitHealthyURL(t, hc, scheme+p.api)
	}
	return procs
}

// stopAtEnd kills procs when the test ends and, if it failed, logs the
// end of each one's log.
func stopAtEnd(t *testing.T, procs []*proc) {
	t.Cleanup(func() {
		for _, p := range procs {
			p.kill()
			p.log.Close()
			if t.Failed() {
				b, _ := os.ReadFile(p.log.Name())
				t.Logf("log of %s:\n%s", p.id, tail(string(b), 3000))
			}
		}
	})
}

// leaderOf returns the process that leads, as c's cluster reports it.
func leaderOf(ctx context.Context, t *testing.T, c *client.Client, procs []*proc) *proc {
	t.Helper()
	_, leaderID, err := c.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.id == leaderID {
			return p
		}
	}
	t.Fatalf("leader %q not among %v", leaderID, procs)
	return nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func waitHealthy(t *testing.T, addr string) {
	t.Helper()
	waitHealthyURL(t, http.DefaultClient, "http://"+addr)
}

func waitHealthyURL(t *testing.T, hc *http.Client, base string) {
	t.Helper()
	addr := base
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := hc.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s not healthy within 15s", addr)
}

func endpoints(procs []*proc) string {
	var eps []string
	for _, p := range procs {
		eps = append(eps, p.api)
	}
	return strings.Join(eps, ",")
}

type grant struct {
	name        string
	lease       string
	token       uint64
	sent, acked time.Time
}

type put struct {
	key, value string
	token      uint64
}

// history is what the workers saw acknowledged.
type history struct {
	mu       sync.Mutex // protects following
	grants   []grant
	puts     []put
	releases []grant
	errors   map[api.Code]int
	examples map[api.Code]string   // the first error of each code
	kvOps    []porcupine.Operation // fenced writes and reads, for the linearizability check
}

func (h *history) errorf(err error) {
	h.mu.Lock()
	code := api.CodeOf(err)
	h.errors[code]++
	if _, ok := h.examples[code]; !ok {
		h.examples[code] = err.Error()
	}
	h.mu.Unlock()
}

// watchNode replays one node's event stream and reports two sessions
// holding one name at once in that node's applied state.
// It closes ready when it sees the first event (the probe), so the caller
// knows the watch is registered before the load starts.
func watchNode(ctx context.Context, addr string, ready chan<- struct{}, onAcquired func(uint64), violations chan<- string) {
	c, err := client.Dial(ctx, addr)
	if err != nil {
		return
	}
	defer c.Close()
	holders := map[string]string{}
	events, err := c.Watch(ctx, "e2e:")
	if err != nil {
		return
	}
	for ev, err := range events {
		if err != nil {
			return
		}
		if ready != nil {
			close(ready)
			ready = nil
		}
		switch ev.GetType() {
		case pb.EventType_EVENT_TYPE_ACQUIRED:
			if h, ok := holders[ev.GetName()]; ok && h != ev.GetLeaseId() {
				violations <- fmt.Sprintf("node %s: %s acquired by %s while held by %s (index %d)", addr, ev.GetName(), ev.GetLeaseId(), h, ev.GetIndex())
			}
			holders[ev.GetName()] = ev.GetLeaseId()
			onAcquired(ev.GetToken())
		case pb.EventType_EVENT_TYPE_RELEASED, pb.EventType_EVENT_TYPE_EXPIRED:
			delete(holders, ev.GetName())
		}
	}
}

// TestClusterKillLeader runs the real binary as a 3-node cluster, puts it
// under concurrent acquire → fenced write → release load, SIGKILLs the
// leader, restarts it, and checks that nothing acknowledged was lost,
// tokens follow real-time order, and no node ever applied two holders.
func TestClusterKillLeader(t *testing.T) {
	procs := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, endpoints(procs))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	leader := leaderOf(ctx, t, c, procs)

	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	violations := make(chan string, 100)
	var (
		seenMu sync.Mutex
		seen   = map[uint64]bool{} // tokens a surviving node applied
	)
	survivor := procs[0]
	if survivor == leader {
		survivor = procs[1]
	}
	var (
		watchers sync.WaitGroup
		readies  []chan struct{}
	)
	for _, p := range procs {
		onAcquired := func(uint64) {}
		if p == survivor {
			onAcquired = func(tok uint64) {
				seenMu.Lock()
				seen[tok] = true
				seenMu.Unlock()
			}
		}
		ready := make(chan struct{})
		readies = append(readies, ready)
		watchers.Go(func() { watchNode(wctx, p.api, ready, onAcquired, violations) })
	}
	// Probe until every watcher has seen an event: then all are registered.
	probe, err := c.NewSession(ctx, client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, ready := range readies {
		for registered := false; !registered; {
			l, err := probe.Acquire(ctx, "e2e:probe")
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case <-ready:
				registered = true
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	if err := probe.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// A session that holds a lock through the whole run: it must survive
	// the leader's death (its keepalives move to the new leader).
	survivorSession, err := c.NewSession(ctx, client.WithTTL(5*time.Second), client.WithOwner("survivor"))
	if err != nil {
		t.Fatal(err)
	}
	held, err := survivorSession.Acquire(ctx, "e2e-held")
	if err != nil {
		t.Fatal(err)
	}

	h := &history{errors: map[api.Code]int{}, examples: map[api.Code]string{}}
	loadCtx, stopLoad := context.WithCancel(ctx)
	var workers sync.WaitGroup
	const nworkers, nnames = 6, 3
	for w := range nworkers {
		workers.Go(func() { worker(loadCtx, endpoints(procs), w, nnames, h) })
	}
	var keys []string
	for i := range nnames {
		keys = append(keys, fmt.Sprintf("e2e:%d", i))
	}
	workers.Go(func() { reader(loadCtx, endpoints(procs), keys, h) })
	time.Sleep(2 * time.Second) // load before the kill
	killed := time.Now()
	leader.kill()
	time.Sleep(3 * time.Second) // load while the leader is down
	// The members list says the dead node is unreachable, not a fresh one.
	ms, _, err := c.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.GetId() == leader.id && (m.GetRole() != "unreachable" || m.GetTerm() != 0) {
			t.Errorf("the killed node in the members list: %v; want role unreachable", m)
		}
	}
	leader.start(t, "")
	waitHealthy(t, leader.api)
	time.Sleep(2 * time.Second) // load after it rejoined
	stopLoad()
	select {
	case <-held.Done():
		t.Fatalf("the session holding e2e-held was lost across the leader's death: %v", context.Cause(held.Context()))
	default:
	}
	if info, err := c.Status(ctx, "e2e-held"); err != nil || info.GetHolder().GetToken() != held.Token() {
		t.Fatalf("e2e-held after the leader's death: %v, %v; want still held with token %d", info, err, held.Token())
	}
	if err := survivorSession.Close(ctx); err != nil {
		t.Fatal(err)
	}
	workers.Wait()

	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.grants) < 20 {
		t.Fatalf("only %d grants acknowledged (errors %v): the load did not run", len(h.grants), h.errors)
	}
	t.Logf("acknowledged: %d grants, %d fenced writes, %d releases; errors by code: %v", len(h.grants), len(h.puts), len(h.releases), h.errors)
	for code, msg := range h.examples {
		t.Logf("  first %s: %s", code, msg)
	}
	// Failover time: the first grant sent after the kill and acknowledged.
	first := time.Duration(-1)
	for _, g := range h.grants {
		if g.sent.After(killed) && (first < 0 || g.acked.Sub(killed) < first) {
			first = g.acked.Sub(killed)
		}
	}
	if first < 0 {
		t.Fatalf("no acquire succeeded after the leader was killed (errors %v)", h.errors)
	}
	t.Logf("time from SIGKILL of the leader to the first successful acquire: %s", first.Round(time.Millisecond))

	// Tokens follow real-time order: a grant acknowledged before another was
	// requested has the smaller token.
	byAck := append([]grant(nil), h.grants...)
	sort.Slice(byAck, func(i, j int) bool { return byAck[i].acked.Before(byAck[j].acked) })
	for _, g := range h.grants {
		for _, e := range byAck {
			if !e.acked.Before(g.sent) {
				break
			}
			if e.token == g.token && e.lease == g.lease {
				continue // the same holding, acquired again after a failed release
			}
			if e.token >= g.token {
				t.Fatalf("token %d (%s) acknowledged before token %d (%s) was requested", e.token, e.name, g.token, g.name)
			}
		}
	}
	// The fenced KV's history (writes of every outcome, linearizable reads)
	// is linearizable.
	if res := porcupine.CheckOperationsTimeout(kvModel, h.kvOps, 30*time.Second); res != porcupine.Ok {
		t.Fatalf("fenced KV history of %d operations is not linearizable (%v)", len(h.kvOps), res)
	}
	t.Logf("fenced KV history of %d operations is linearizable", len(h.kvOps))
	// Every acknowledged fenced write survives: the key's final token is at
	// least the largest acknowledged, with that write's value when equal.
	best := map[string]put{}
	for _, p := range h.puts {
		if p.token >= best[p.key].token {
			best[p.key] = p
		}
	}
	for key, p := range best {
		v, tok, err := c.KVGet(ctx, key)
		if err != nil {
			t.Fatalf("kv get %s: %v", key, err)
		}
		if tok < p.token || (tok == p.token && string(v) != p.value) {
			t.Fatalf("acknowledged write %s=%q@%d lost: the key holds %q@%d", key, p.value, p.token, v, tok)
		}
	}
	// The killed node rejoined and caught up: its own applied state (a
	// stale read served locally) reaches every key's final value.
	rc, err := client.Dial(ctx, leader.api)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	for key := range best {
		want, wantTok, err := c.KVGet(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			v, tok, err := rc.KVGet(ctx, key, client.Stale())
			if err == nil && tok == wantTok && string(v) == string(want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("restarted node %s did not catch up on %s: has %q@%d (%v), want %q@%d", leader.id, key, v, tok, err, want, wantTok)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Every acknowledged release holds: the holding is not current.
	for _, r := range h.releases {
		info, err := c.Status(ctx, r.name)
		if err != nil {
			t.Fatal(err)
		}
		if info.GetHolder().GetToken() == r.token {
			t.Fatalf("acknowledged release of %s token %d lost", r.name, r.token)
		}
	}
	// Every acknowledged grant was applied by a node that never died.
	deadline := time.Now().Add(10 * time.Second)
	for _, g := range h.grants {
		for {
			seenMu.Lock()
			ok := seen[g.token]
			seenMu.Unlock()
			if ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("acknowledged grant %s token %d never applied on %s", g.name, g.token, survivor.id)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	stopWatch()
	watchers.Wait()
	close(violations)
	for v := range violations {
		t.Error("two holders:", v)
	}

	// With two of three nodes gone, a write is refused as unavailable by
	// the request's deadline instead of hanging.
	var last *proc
	for _, p := range procs {
		if p != survivor {
			p.kill()
		} else {
			last = p
		}
	}
	start := time.Now()
	out, err := exec.Command(binary, "acquire", "e2e:no-quorum", "--endpoints", last.api, "--timeout", "2s", "-o", "json").Output()
	took := time.Since(start)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != api.CodeUnavailable.ExitCode() {
		t.Fatalf("acquire without quorum: err %v, output %s; want exit %d (unavailable)", err, out, api.CodeUnavailable.ExitCode())
	}
	if !strings.Contains(string(out), `"code":"unavailable"`) || took > 4*time.Second {
		t.Fatalf("acquire without quorum took %s and printed %s", took, out)
	}
}

// worker loops acquire → fenced write → release on a few names until ctx
// ends, recording what was acknowledged.
func worker(ctx context.Context, eps string, id, nnames int, h *history) {
	c, err := client.Dial(ctx, eps)
	if err != nil {
		return
	}
	defer c.Close()
	var s *client.Session
	defer func() {
		if s != nil {
			_ = s.Close(context.Background())
		}
	}()
	for i := 0; ctx.Err() == nil; i++ {
		if s == nil || s.Err() != nil {
			s, err = c.NewSession(ctx, client.WithTTL(5*time.Second), client.WithOwner(fmt.Sprintf("w%d", id)))
			if err != nil {
				h.errorf(err)
				continue
			}
		}
		name := fmt.Sprintf("e2e:%d", (id+i)%nnames)
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		sent := time.Now()
		l, err := s.Acquire(actx, name)
		cancel()
		if err != nil {
			h.errorf(err)
			continue
		}
		// A session that already held the name (its release failed) gets
		// the same holding back: that grant happened when first made.
		if at := time.UnixMilli(l.Holding().GetAcquiredUnixMs()).Add(-time.Millisecond); at.Before(sent) {
			sent = at
		}
		g := grant{name: name, lease: l.LeaseID(), token: l.Token(), sent: sent, acked: time.Now()}
		h.mu.Lock()
		h.grants = append(h.grants, g)
		h.mu.Unlock()
		value := fmt.Sprintf("w%d-%d", id, l.Token())
		call := time.Now()
		err = c.KVPut(ctx, name, []byte(value), l.Token(), false)
		h.recordPut(name, l.Token(), value, call, err)
		if err != nil {
			h.errorf(err)
		} else {
			h.mu.Lock()
			h.puts = append(h.puts, put{key: name, value: value, token: l.Token()})
			h.mu.Unlock()
		}
		// Release, as a careful client does: after an unknown outcome, try
		// again until released or not-holder (the first try applied), so a
		// lock this worker no longer wants is not left held.
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = l.Release(rctx)
		for retries := 0; err != nil && errors.Is(err, client.ErrOutcomeUnknown) && retries < 5; retries++ {
			h.errorf(err)
			err = l.Release(rctx)
		}
		cancel()
		if err != nil {
			h.errorf(err)
			continue
		}
		h.mu.Lock()
		h.releases = append(h.releases, g)
		h.mu.Unlock()
	}
}
