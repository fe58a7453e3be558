// Command abuse replays floods against a running leasehold node and judges
// each by what a well-behaved client sees meanwhile; scripts/abuse.sh
// builds the binary, starts a node and runs it (docs/operating/security.md,
// "The abuse script").
//
// A canary client from 127.0.0.1 holds one lock under a session it keeps
// alive, and loops acquire → fenced KV write → release on another name;
// its p90 is measured idle, before each flood, and during it. Fresh
// clients from 127.0.0.1 (a new connection each) create a session 5 times
// a second during each flood. The floods dial from another address,
// 127.0.0.2 by default (-flood-src): on one address the attacker and the
// canary would be one client to the node. Each flood prints one row; the
// run fails when a flood breaks the rule (rule.go) or anything the canary
// was told is lost.
//
//	go run ./scripts/abuse -addr 127.0.0.1:7420 [-short] [-only NAME] [-conns N]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"time"

	lh "github.com/leasehold/leasehold/client"
)

// settle is the pause before each flood's idle measurement.
const settle = time.Second

func main() {
	addr := flag.String("addr", lh.DefaultEndpoint, "the node's API address (plaintext, auth off)")
	short := flag.Bool("short", false, "the short form: a few seconds per flood (CI)")
	only := flag.String("only", "", "run only this flood (one of "+floodNames()+")")
	src := flag.String("flood-src", "127.0.0.2", "the address floods dial from (another host; the canary uses 127.0.0.1)")
	conns := flag.Int("conns", 4096, "the node's conns limit (serve --limit conns): the idle-connection flood holds twice as many")
	dur := flag.Duration("dur", 0, "how long each flood lasts (default 4s short, 30s full)")
	idle := flag.Duration("idle", 0, "how long the canary is measured idle before each flood (default 2s short, 5s full)")
	freePort := flag.Bool("free-port", false, "print a free TCP port on 127.0.0.1 and exit")
	child := flag.String("flood-child", "", "run this one flood in this process and report on stdout (used by the driver itself)")
	open := flag.String("latency-open", "", "comma-separated floods whose canary latency is a known open problem: reported, but only a loss, a fresh client kept out or a broken flood fails the run")
	flag.Parse()
	if *freePort {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fatal(err)
		}
		fmt.Println(l.Addr().(*net.TCPAddr).Port)
		_ = l.Close()
		return
	}
	if *dur == 0 {
		*dur = pick(*short, 4*time.Second, 30*time.Second)
	}
	if *idle == 0 {
		*idle = pick(*short, 2*time.Second, 5*time.Second)
	}
	name := *only
	if *child != "" {
		name = *child
	}
	var run []flood
	for _, f := range floods {
		if name == "" || f.name == name {
			run = append(run, f)
		}
	}
	if len(run) == 0 {
		fatal(fmt.Errorf("no flood named %q (%s)", name, floodNames()))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	e := &env{addr: *addr, src: *src, short: *short, conns: *conns}
	var code int
	if *child != "" {
		code = runChild(ctx, e, run[0], *dur)
	} else {
		known := map[string]bool{}
		for _, n := range strings.Split(*open, ",") {
			if n != "" {
				known[n] = true
			}
		}
		code = abuse(ctx, os.Stdout, e, run, known, *idle, *dur)
	}
	stop()
	os.Exit(code)
}

func pick[T any](short bool, s, full T) T {
	if short {
		return s
	}
	return full
}

func floodNames() string {
	var n []string
	for _, f := range floods {
		n = append(n, f.name)
	}
	return strings.Join(n, ", ")
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "abuse:", err)
	os.Exit(2)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "abuse: [%s] %s\n", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// abuse runs the floods and returns the exit code: 0 when every flood held
// and nothing the canary was told was lost, 1 otherwise. A flood in open
// whose only failure is the canary's latency is reported "FAILED (open)"
// and does not set the code.
func abuse(ctx context.Context, out io.Writer, e *env, run []flood, open map[string]bool, idle, dur time.Duration) int {
	if err := waitReady(ctx, e.addr, 30*time.Second); err != nil {
		fatal(err)
	}
	k, err := startCanary(ctx, e.addr)
	if err != nil {
		fatal(err)
	}
	defer k.close()
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); k.run(cctx) }()
	var lostEarlier []string

	fmt.Fprintf(out, "%-12s %9s %9s %10s %10s %8s %9s  %s\n", "flood", "sent", "refused", "idle p90", "flood p90", "factor", "fresh", "verdict")
	code := 0
	var why []string
	for _, f := range run {
		r := runFlood(ctx, e, k, f, idle, dur)
		v, reason := r.verdict()
		latencyOnly := v == verdictFailed && open[r.flood] && r.unsafe() == ""
		if latencyOnly {
			v += " (open)"
		}
		fmt.Fprintf(out, "%-12s %9d %9d %10s %10s %7.1f× %9s  %s\n", r.flood, r.sent, r.refused,
			ms(r.idle), ms(r.busy), r.factor(), fmt.Sprintf("%d/%d", r.freshOK, r.freshTried), v)
		switch {
		case latencyOnly:
			why = append(why, r.flood+" (open, does not fail the run): "+reason)
		case v == verdictFailed:
			code = 1
			why = append(why, r.flood+": "+reason)
		}
		if ctx.Err() != nil {
			break
		}
		if r.lost != "" {
			// A new canary measures the next floods; this loss stays reported.
			lostEarlier = append(lostEarlier, r.lost+" (under the "+r.flood+" flood)")
			cancel()
			<-done
			if err := k.restart(ctx); err != nil {
				fmt.Fprintln(out, "LOST", strings.Join(lostEarlier, "; "))
				fatal(fmt.Errorf("a new canary: %w", err))
			}
			logf("a new canary holds %s with token %d", canaryHeld, k.held.Token())
			cctx, cancel = context.WithCancel(ctx)
			done = make(chan struct{})
			go func() { defer close(done); k.run(cctx) }()
		}
	}
	cancel()
	<-done
	writes, lost := k.verify(context.WithoutCancel(ctx))
	lost = append(lostEarlier, lost...)
	for _, w := range why {
		fmt.Fprintln(out, "FAILED", w)
	}
	for _, l := range lost {
		fmt.Fprintln(out, "LOST", l)
	}
	if len(lost) > 0 {
		code = 1
	}
	fmt.Fprintf(out, "canary: %d writes acknowledged, %d keys read back, %d lost; the canary holds %s with token %d\n",
		writes, min(writes, canaryKeys), len(lost), canaryHeld, k.held.Token())
	return code
}

// ms prints a duration in milliseconds with one decimal.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

// runFlood measures the canary idle, runs f with fresh clients trying
// meanwhile, and checks the canary's lock after it.
func runFlood(ctx context.Context, e *env, k *canary, f flood, idle, dur time.Duration) result {
	r := result{flood: f.name}
	// What the previous flood left behind (closed sessions, released
	// names) settles before the canary is measured idle.
	sleepCtx(ctx, settle)
	logf("%s: measuring the canary idle for %v", f.name, idle)
	k.setPhase("idle:" + f.name)
	sleepCtx(ctx, idle)
	k.setPhase("")
	var freshDone chan struct{}
	var freshErr error
	started := false
	start := func() {
		started = true
		logf("%s: flooding for %v: %s", f.name, dur, f.what)
		k.setPhase("flood:" + f.name)
		w, cancel := context.WithTimeout(ctx, dur)
		context.AfterFunc(w, func() { k.setPhase(""); cancel() })
		freshDone = make(chan struct{})
		go func() {
			defer close(freshDone)
			r.freshOK, r.freshTried, freshErr = freshClients(w, e.addr, 200*time.Millisecond)
		}()
	}
	logf("%s: setting up", f.name)
	rep, err := spawn(ctx, e, f, dur, start)
	k.setPhase("")
	if freshDone != nil {
		<-freshDone
	}
	r.sent, r.refused = rep.Sent, rep.Refused
	var failed int
	var first error
	r.idle, _, _, _ = k.stats("idle:" + f.name)
	r.busy, r.busyRounds, failed, first = k.stats("flood:" + f.name)
	switch {
	case err != nil:
		r.broken = err.Error()
	case !started:
		r.broken = "it never started"
	}
	r.lost = k.holding(ctx)
	if first != nil {
		logf("%s: %d of %d canary rounds failed under the flood (each counted as %v), the first: %v", f.name, failed, r.busyRounds, opTimeout, first)
	}
	if freshErr != nil {
		logf("%s: a fresh client failed: %v", f.name, freshErr)
	}
	logf("%s: done: %d sent, %d refused; answers: %s", f.name, r.sent, r.refused, rep.Answers)
	return r
}

// waitReady waits until the node creates a session for a new client.
func waitReady(ctx context.Context, addr string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		err := freshClient(addr)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s not ready after %v: %w", addr, within, errors.Join(err, ctx.Err()))
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}
