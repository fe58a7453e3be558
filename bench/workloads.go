package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/client"
)

// params size the workloads. Every loop is bounded by a count and a time.
type params struct {
	Dur         time.Duration // one measurement (uncontended, contended, churn)
	Uncontended []int         // concurrencies
	Contended   []int
	Sessions    int           // sessions each holding a lock
	Window      time.Duration // keepalive CPU window over those sessions
	SessionTTL  time.Duration // their TTL; they renew every TTL/3
	ChurnC      int
	Crashes     int           // holder-crash trials
	CrashTTL    time.Duration // the crashed holder's TTL
	MaxOps      int64         // per worker and measurement
	ProfDir     string        // when set, leasehold's server is profiled into it
	LeaderKills int           // leader-kill trials (clusters only)
	// Only, when not nil, runs just these kinds of workload: uncontended,
	// contended, sessions, churn, crash, leaderkill.
	Only map[string]bool
}

// profile starts CPU and allocation profiles of a leasehold server over
// the next d when p.ProfDir is set; the returned func waits for them.
func (p params) profile(ctx context.Context, sys system, label string, d time.Duration) func() {
	l, ok := sys.(*leasehold)
	if p.ProfDir == "" || !ok {
		return func() {}
	}
	errc := make(chan error, 1)
	go func() { errc <- l.profile(ctx, p.ProfDir, label, d) }()
	stopClient := profileClient(p.ProfDir, label)
	return func() {
		if err := errors.Join(<-errc, stopClient()); err != nil {
			log.Printf("profile %s: %v", label, err)
		}
	}
}

// profileClient profiles this process (leasehold's Go client) from now
// until the returned func: dir/<label>.client.cpu.pprof, and
// dir/<label>.client.allocs{0,}.pprof, the allocation profile at the
// start and at the end (`go tool pprof -base` gives what the run allocated).
func profileClient(dir, label string) func() error {
	base := filepath.Join(dir, label+".client")
	if err := writeProfile("allocs", base+".allocs0.pprof"); err != nil {
		return func() error { return err }
	}
	f, err := os.Create(base + ".cpu.pprof")
	if err != nil {
		return func() error { return err }
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return func() error { return err }
	}
	return func() error {
		pprof.StopCPUProfile()
		return errors.Join(f.Close(), writeProfile("allocs", base+".allocs.pprof"))
	}
}

func writeProfile(name, file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	return errors.Join(pprof.Lookup(name).WriteTo(f, 0), f.Close())
}

func fullParams() params {
	return params{
		Dur: 5 * time.Second, Uncontended: []int{1, 16, 64}, Contended: []int{2, 16, 64},
		Sessions: 10000, Window: 10 * time.Second, SessionTTL: 10 * time.Second,
		ChurnC: 16, Crashes: 3, CrashTTL: 2 * time.Second, MaxOps: 1 << 20,
	}
}

func smokeParams() params {
	return params{
		Dur: 300 * time.Millisecond, Uncontended: []int{1, 4}, Contended: []int{2},
		Sessions: 20, Window: time.Second, SessionTTL: 3 * time.Second,
		ChurnC: 2, Crashes: 1, CrashTTL: 2 * time.Second, MaxOps: 10000,
	}
}

// clusterParams are the 3-node rows: throughput, contention and leader
// kills (the session-scale, churn and holder-crash rows are single-node).
func clusterParams() params {
	return params{
		Dur: 5 * time.Second, Uncontended: []int{1, 16, 64}, Contended: []int{16, 64},
		LeaderKills: 5, MaxOps: 1 << 20,
	}
}

func smokeClusterParams() params {
	return params{
		Dur: 300 * time.Millisecond, Uncontended: []int{1, 4}, Contended: []int{2},
		LeaderKills: 1, MaxOps: 10000,
	}
}

// runs reports whether the workload kind runs under p.
func (p params) runs(kind string) bool { return p.Only == nil || p.Only[kind] }

// metric is one measured figure of one system in one round.
type metric struct {
	Workload string  // "uncontended C=16"
	Name     string  // "pairs/s"
	Higher   bool    // a higher value is better
	Value    float64 //
}

// cpuMeter measures the server's CPU (from /proc) and this process's (the
// clients') over an interval.
type cpuMeter struct {
	pids               []int
	server0, client0   time.Duration
	start              time.Time
	serverCPU, clientC time.Duration
}

func startCPU(pids []int) *cpuMeter {
	m := &cpuMeter{pids: pids, client0: selfCPU(), start: time.Now()}
	m.server0, _ = procsCPU(pids)
	return m
}

func (m *cpuMeter) stop() time.Duration {
	s, _ := procsCPU(m.pids)
	m.serverCPU, m.clientC = s-m.server0, selfCPU()-m.client0
	return time.Since(m.start)
}

func perOp(d time.Duration, n int64) float64 {
	if n == 0 {
		return math.NaN()
	}
	return float64(d.Microseconds()) / float64(n)
}

func quantile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := min(len(sorted)-1, int(q*float64(len(sorted))))
	return float64(sorted[i].Microseconds()) / 1000
}

// openSessions opens n sessions with ttl from up to 64 goroutines.
func openSessions(ctx context.Context, c conn, n int, ttl time.Duration) ([]session, error) {
	ss := make([]session, n)
	err := parallel(min(n, 64), n, func(i int) error {
		s, err := c.NewSession(ctx, ttl)
		ss[i] = s
		return err
	})
	if err != nil {
		closeSessions(c, ss)
		return nil, err
	}
	return ss, nil
}

func closeSessions(_ conn, ss []session) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = parallel(min(len(ss), 64), len(ss), func(i int) error {
		if ss[i] != nil {
			_ = ss[i].Close(ctx)
		}
		return nil
	})
}

// parallel runs f(0..n-1) from w goroutines and returns the first error.
func parallel(w, n int, f func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, w)
	for range w {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					errc <- err
					next.Store(int64(n)) // stop the others
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	return <-errc
}

// uncontended: C workers, each with its own session and name, acquire and
// release in a loop.
func uncontended(ctx context.Context, sys system, c conn, p params, conc int) ([]metric, error) {
	ss, err := openSessions(ctx, c, conc, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer closeSessions(c, ss)
	wl := fmt.Sprintf("uncontended C=%d", conc)
	lats := make([][]time.Duration, conc)
	var pairs atomic.Int64
	// One pair each before timing: connections and names exist.
	if err := parallel(conc, conc, func(i int) error { return pair(ctx, ss[i], fmt.Sprintf("u/%d", i), nil) }); err != nil {
		return nil, err
	}
	prof := p.profile(ctx, sys, fmt.Sprintf("uncontended-c%d", conc), p.Dur)
	fsyncs := startFsyncCount(sys.PIDs())
	m := startCPU(sys.PIDs())
	end := time.Now().Add(p.Dur)
	err = parallel(conc, conc, func(i int) error {
		name := fmt.Sprintf("u/%d", i)
		for n := int64(0); n < p.MaxOps && time.Now().Before(end); n++ {
			if err := pair(ctx, ss[i], name, &lats[i]); err != nil {
				return err
			}
			pairs.Add(1)
		}
		return nil
	})
	elapsed := m.stop()
	nsync := fsyncs.stop()
	prof()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", wl, err)
	}
	all := slices.Concat(lats...)
	slices.Sort(all)
	n := pairs.Load()
	ms := []metric{
		{wl, "pairs/s", true, float64(n) / elapsed.Seconds()},
		{wl, "acquire p50 ms", false, quantile(all, 0.50)},
		{wl, "acquire p99 ms", false, quantile(all, 0.99)},
		{wl, "CPU µs/pair (server+client)", false, perOp(m.serverCPU+m.clientC, n)},
		{wl, "server CPU µs/pair", false, perOp(m.serverCPU, n)},
	}
	if nsync >= 0 && n > 0 {
		ms = append(ms, metric{wl, "server fsyncs/pair", false, float64(nsync) / float64(n)})
	}
	return ms, nil
}

// pair acquires and releases name, appending the acquire's latency to lat.
func pair(ctx context.Context, s session, name string, lat *[]time.Duration) error {
	t := time.Now()
	unlock, err := s.Lock(ctx, name)
	if err != nil {
		return err
	}
	if lat != nil {
		*lat = append(*lat, time.Since(t))
	}
	return unlock(ctx)
}

// cutByEnd reports whether err is a wait that wctx's deadline ended. The
// deadline travels with the request, so the server may answer
// deadline-exceeded a moment before wctx itself ends here: such an answer
// counts when wctx ends within a second of it.
func cutByEnd(wctx context.Context, err error) bool {
	if wctx.Err() != nil {
		return true
	}
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, client.ErrDeadlineExceeded) {
		return false
	}
	select {
	case <-wctx.Done():
		return true
	case <-time.After(time.Second):
		return false
	}
}

// contended: C workers with their own sessions take turns on one name.
func contended(ctx context.Context, sys system, c conn, p params, conc int) ([]metric, error) {
	ss, err := openSessions(ctx, c, conc, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer closeSessions(c, ss)
	wl := fmt.Sprintf("contended C=%d", conc)
	if err := pair(ctx, ss[0], "c/one", nil); err != nil {
		return nil, err
	}
	counts := make([]int64, conc)
	waits := make([][]time.Duration, conc)
	prof := p.profile(ctx, sys, fmt.Sprintf("contended-c%d", conc), p.Dur)
	fsyncs := startFsyncCount(sys.PIDs())
	m := startCPU(sys.PIDs())
	end := time.Now().Add(p.Dur)
	// Waiters still queued at the end give up then.
	wctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	err = parallel(conc, conc, func(i int) error {
		for n := int64(0); n < p.MaxOps && time.Now().Before(end); n++ {
			t := time.Now()
			unlock, err := ss[i].Lock(wctx, "c/one")
			if err != nil {
				if cutByEnd(wctx, err) {
					return nil
				}
				return err
			}
			if time.Now().Before(end) {
				counts[i]++
				waits[i] = append(waits[i], time.Since(t))
			}
			if err := unlock(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	elapsed := m.stop()
	nsync := fsyncs.stop()
	prof()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", wl, err)
	}
	var total int64
	for _, n := range counts {
		total += n
	}
	all := slices.Concat(waits...)
	slices.Sort(all)
	fair := math.Inf(1)
	if lo := slices.Min(counts); lo > 0 {
		fair = float64(slices.Max(counts)) / float64(lo)
	}
	ms := []metric{
		{wl, "handoffs/s", true, float64(total) / elapsed.Seconds()},
		{wl, "wait p50 ms", false, quantile(all, 0.50)},
		{wl, "wait p99 ms", false, quantile(all, 0.99)},
		{wl, "fairness max/min per worker", false, fair},
		{wl, "server CPU µs/handoff", false, perOp(m.serverCPU, total)},
	}
	if nsync >= 0 && total > 0 {
		ms = append(ms, metric{wl, "server fsyncs/handoff", false, float64(nsync) / float64(total)})
	}
	return ms, nil
}

// sessionsHeld: N sessions each holding a lock; then the keepalive CPU of
// the server and of the clients over a window while they all stay alive.
func sessionsHeld(ctx context.Context, sys system, c conn, p params) ([]metric, error) {
	wl := fmt.Sprintf("%d sessions, a lock each", p.Sessions)
	mem0 := heapInUse()
	t0 := time.Now()
	ss, err := openSessions(ctx, c, p.Sessions, p.SessionTTL)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", wl, err)
	}
	defer closeSessions(c, ss)
	// A session lost under load fails its Lock; it is counted as lost.
	var lockFailed atomic.Int64
	_ = parallel(min(p.Sessions, 64), p.Sessions, func(i int) error {
		if _, err := ss[i].Lock(ctx, fmt.Sprintf("h/%d", i)); err != nil {
			lockFailed.Add(1)
		}
		return ctx.Err()
	})
	setup := time.Since(t0)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if lockFailed.Load() == int64(p.Sessions) {
		return nil, fmt.Errorf("%s: every lock failed", wl)
	}
	clientBytes := float64(heapInUse()-mem0) / float64(p.Sessions)
	rss, _ := procsRSS(sys.PIDs())
	// Let the first renewals after setup pass, then measure a window.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(p.SessionTTL / 3):
	}
	prof := p.profile(ctx, sys, "keepalive", p.Window)
	m := startCPU(sys.PIDs())
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(p.Window):
	}
	elapsed := m.stop()
	prof()
	renewals := int64(float64(p.Sessions) * elapsed.Seconds() / (p.SessionTTL / 3).Seconds())
	lost := 0
	for _, s := range ss {
		if !s.Alive() {
			lost++
		}
	}
	lost = max(lost, int(lockFailed.Load()))
	return []metric{
		{wl, "setup s", false, setup.Seconds()},
		{wl, "server RSS MiB", false, float64(rss) / (1 << 20)},
		{wl, "client bytes/session", false, clientBytes},
		{wl, "keepalive CPU µs/renewal (server+client)", false, perOp(m.serverCPU+m.clientC, renewals)},
		{wl, "keepalive server CPU µs/renewal", false, perOp(m.serverCPU, renewals)},
		{wl, "sessions lost", false, float64(lost)},
	}, nil
}

// heapInUse is the clients' live heap and goroutine stacks after a GC.
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc + ms.StackInuse)
}

// churn: C workers create a lease, renew it once and end it, in a loop.
func churn(ctx context.Context, sys system, c conn, p params) ([]metric, error) {
	wl := fmt.Sprintf("lease churn C=%d", p.ChurnC)
	var n atomic.Int64
	m := startCPU(sys.PIDs())
	end := time.Now().Add(p.Dur)
	err := parallel(p.ChurnC, p.ChurnC, func(int) error {
		for k := int64(0); k < p.MaxOps && time.Now().Before(end); k++ {
			if err := c.Churn(ctx, 10*time.Second); err != nil {
				return err
			}
			n.Add(1)
		}
		return nil
	})
	elapsed := m.stop()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", wl, err)
	}
	return []metric{{wl, "churns/s", true, float64(n.Load()) / elapsed.Seconds()}}, nil
}

// crash: a holder with TTL CrashTTL takes a lock and stops renewing at
// once (a crash); a waiter is queued. The overshoot is how long past the
// TTL, counted from the crash, the waiter got the lock. The holder's last
// renewal was at or before the crash, so this is a lower bound of the
// overshoot past its lease, by at most one acquire round trip.
func crash(ctx context.Context, sys system, c conn, p params) ([]metric, error) {
	wl := fmt.Sprintf("holder crash, TTL %v", p.CrashTTL)
	var overs []time.Duration
	for k := range p.Crashes {
		name := fmt.Sprintf("x/%d", k)
		holder, err := c.NewSession(ctx, p.CrashTTL)
		if err != nil {
			return nil, err
		}
		waiter, err := c.NewSession(ctx, 10*time.Second)
		if err != nil {
			return nil, err
		}
		if _, err := holder.Lock(ctx, name); err != nil {
			return nil, err
		}
		t0 := time.Now()
		holder.Crash()
		lctx, cancel := context.WithTimeout(ctx, 10*p.CrashTTL+5*time.Second)
		unlock, err := waiter.Lock(lctx, name)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s: waiter: %w", wl, err)
		}
		overs = append(overs, time.Since(t0)-p.CrashTTL)
		_ = unlock(ctx)
		_ = waiter.Close(ctx)
		_ = holder.Close(ctx)
	}
	slices.Sort(overs)
	return []metric{{wl, "next holder after TTL ms (median)", false, float64(overs[len(overs)/2].Microseconds()) / 1000}}, nil
}
