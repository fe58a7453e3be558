// Command bench runs leasehold, an embedded etcd and Redis side by side
// under the same lock workloads and writes a Markdown table and PNG charts.
//
//	cd bench && go run . -o ../docs/bench
//
// It builds cmd/leasehold from the source tree above, starts each server
// in turn as its own process (durable defaults, a temporary data dir, a
// free port on 127.0.0.1), runs every workload against it, stops it, and
// repeats the rounds in the same order (A B C A B C); each figure is the
// median of the rounds. Redis runs only when redis-server is on PATH.
// -smoke runs tiny counts in one round (CI checks that every system ran).
//
// -cluster runs 3-node clusters instead: three `leasehold serve` processes
// bootstrapped together and three embedded etcd members (each a process of
// its own), all on 127.0.0.1, the client given every node's endpoint; the
// uncontended, contended and leader-kill workloads; cluster.md and
// cluster-*.png. Redis has no 3-node form with the same guarantee here and
// does not run.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	out     string // output dir for results.md and charts; empty writes nothing
	smoke   bool
	cluster bool // 3-node clusters (clusterNodes)
	rounds  int
	systems []string
	src     string // leasehold source tree
	pprof   string // profile leasehold's server into this dir
	p       params
}

func main() {
	if spec := os.Getenv(etcdChildEnv); spec != "" {
		if err := runEtcdChild(spec); err != nil {
			log.Fatal(err)
		}
		return
	}
	var o options
	var systems, only, unc, con string
	var sessions int
	flag.StringVar(&o.out, "o", "../docs/bench", "write results.md and the PNG charts into this dir")
	flag.BoolVar(&o.smoke, "smoke", false, "tiny counts, one round: checks that everything runs")
	flag.IntVar(&o.rounds, "rounds", 2, "rounds of every system in turn")
	flag.StringVar(&systems, "systems", "leasehold,etcd,redis", "systems to run, in this order; leasehold@REV is leasehold built from git revision REV (before/after a change in one run)")
	flag.StringVar(&o.src, "src", "..", "leasehold source tree to build cmd/leasehold from")
	flag.StringVar(&o.pprof, "pprof", "", "write CPU and allocation profiles of leasehold's server and Go client (uncontended, contended and keepalive phases) into this dir")
	flag.IntVar(&sessions, "sessions", 0, "sessions each holding a lock (default 10000; smoke 20; with -cluster, none unless set)")
	flag.BoolVar(&o.cluster, "cluster", false, "3-node clusters of leasehold and etcd on 127.0.0.1: uncontended, contended and leader-kill rows into cluster.md")
	flag.StringVar(&only, "workloads", "", "run only these workloads (comma-separated: uncontended, contended, sessions, churn, crash, leaderkill); default all")
	flag.StringVar(&unc, "uncontended", "", "uncontended concurrencies, comma-separated (default 1,16,64)")
	flag.StringVar(&con, "contended", "", "contended concurrencies, comma-separated (default 2,16,64; cluster 16,64)")
	flag.Parse()
	o.systems = strings.Split(systems, ",")
	switch {
	case o.smoke && o.cluster:
		o.p, o.rounds = smokeClusterParams(), 1
	case o.smoke:
		o.p, o.rounds = smokeParams(), 1
	case o.cluster:
		o.p = clusterParams()
	default:
		o.p = fullParams()
	}
	if sessions > 0 {
		o.p.Sessions = sessions
		if o.p.SessionTTL == 0 { // a cluster run measures keepalives only when asked
			o.p.Window, o.p.SessionTTL = 10*time.Second, 10*time.Second
		}
	}
	if only != "" {
		o.p.Only = map[string]bool{}
		for _, w := range strings.Split(only, ",") {
			o.p.Only[w] = true
		}
	}
	var err error
	if o.p.Uncontended, err = intList(unc, o.p.Uncontended); err != nil {
		log.Fatalf("-uncontended: %v", err)
	}
	if o.p.Contended, err = intList(con, o.p.Contended); err != nil {
		log.Fatalf("-contended: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := run(ctx, o, os.Stderr)
	if err != nil {
		log.Fatal(err)
	}
	res.Command = "cd bench && go run . " + strings.Join(os.Args[1:], " ")
	if o.out != "" {
		if err := res.write(o.out); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Print(res.table())
}

// intList parses "1,16,64"; empty s is def.
func intList(s string, def []int) ([]int, error) {
	if s == "" {
		return def, nil
	}
	var v []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive count", f)
		}
		v = append(v, n)
	}
	return v, nil
}

// run runs every workload against every system, o.rounds times.
func run(ctx context.Context, o options, logw *os.File) (*results, error) {
	lg := log.New(logw, "bench: ", log.Ltime)
	tmp, err := os.MkdirTemp("", "leasehold-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	res := newResults(o)
	nodes := 1
	if o.cluster {
		nodes = clusterNodes
	}
	var systems []system
	for _, name := range o.systems {
		switch {
		case name == "leasehold":
			lg.Print("building cmd/leasehold")
			bin, err := buildLeasehold(ctx, o.src, tmp)
			if err != nil {
				return nil, err
			}
			systems = append(systems, &leasehold{name: name, bin: bin, pprof: o.pprof != "", sessions: o.p.Sessions, nodes: nodes})
		case strings.HasPrefix(name, "leasehold@"):
			rev := strings.TrimPrefix(name, "leasehold@")
			lg.Printf("building cmd/leasehold at %s", rev)
			bin, err := buildLeaseholdAt(ctx, o.src, rev, filepath.Join(tmp, "rev-"+rev))
			if err != nil {
				return nil, err
			}
			systems = append(systems, &leasehold{name: name, bin: bin, pprof: o.pprof != "", sessions: o.p.Sessions, nodes: nodes})
		case name == "etcd":
			systems = append(systems, &etcd{nodes: nodes})
		case name == "redis" && o.cluster:
			res.Skipped = append(res.Skipped, "redis: no 3-node form with the same guarantee (redsync's Redlock over independent servers is another algorithm)")
		case name == "redis":
			bin, err := exec.LookPath("redis-server")
			if err != nil {
				res.Skipped = append(res.Skipped, "redis: redis-server is not on PATH")
				continue
			}
			systems = append(systems, &redisSystem{bin: bin})
		default:
			return nil, fmt.Errorf("unknown system %q", name)
		}
	}
	if o.pprof != "" {
		if err := os.MkdirAll(o.pprof, 0o755); err != nil {
			return nil, err
		}
		o.p.ProfDir = o.pprof
	}
	for r := range o.rounds {
		for _, sys := range systems {
			lg.Printf("round %d: %s", r+1, sys.Name())
			dir := filepath.Join(tmp, fmt.Sprintf("%s-%d", sys.Name(), r))
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, err
			}
			ms, err := runSystem(ctx, sys, dir, o.p, lg)
			if err != nil {
				return nil, fmt.Errorf("round %d: %s: %w", r+1, sys.Name(), err)
			}
			res.add(sys.Name(), ms)
			_ = os.RemoveAll(dir)
		}
	}
	return res, nil
}

// runSystem starts sys, runs every workload it supports and stops it.
func runSystem(ctx context.Context, sys system, dir string, p params, lg *log.Logger) (ms []metric, err error) {
	t0 := time.Now()
	if err := sys.Start(ctx, dir); err != nil {
		return nil, err
	}
	defer func() {
		if serr := sys.Stop(); err == nil && serr != nil {
			err = serr
		}
	}()
	c, err := sys.Dial(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	type workload struct {
		name string
		f    func() ([]metric, error)
	}
	var wls []workload
	for _, conc := range p.Uncontended {
		wls = append(wls, workload{fmt.Sprintf("uncontended C=%d", conc), func() ([]metric, error) { return uncontended(ctx, sys, c, p, conc) }})
	}
	for _, conc := range p.Contended {
		wls = append(wls, workload{fmt.Sprintf("contended C=%d", conc), func() ([]metric, error) { return contended(ctx, sys, c, p, conc) }})
	}
	if sys.Sessions() && p.Sessions > 0 {
		wls = append(wls, workload{"sessions", func() ([]metric, error) { return sessionsHeld(ctx, sys, c, p) }})
	}
	if sys.Sessions() && p.ChurnC > 0 {
		wls = append(wls, workload{"churn", func() ([]metric, error) { return churn(ctx, sys, c, p) }})
	}
	if p.Crashes > 0 {
		wls = append(wls, workload{"crash", func() ([]metric, error) { return crash(ctx, sys, c, p) }})
	}
	if p.LeaderKills > 0 {
		wls = append(wls, workload{"leaderkill", func() ([]metric, error) { return leaderKill(ctx, sys, c, p) }})
	}
	for _, wl := range wls {
		if kind, _, _ := strings.Cut(wl.name, " "); !p.runs(kind) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t := time.Now()
		m, err := wl.f()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", wl.name, err)
		}
		lg.Printf("  %s: %s (%.1f s)", sys.Name(), wl.name, time.Since(t).Seconds())
		ms = append(ms, m...)
	}
	lg.Printf("  %s: done in %.1f s", sys.Name(), time.Since(t0).Seconds())
	return ms, nil
}
