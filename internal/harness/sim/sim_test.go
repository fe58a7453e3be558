//go:build leasehold_sim

package sim

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/internal/harness/linz"
)

var (
	seedFlag     = flag.Uint64("seed", 0, "run only this seed (replay)")
	seedsFlag    = flag.Int("seeds", 20, "number of seeds to run, from -first")
	firstFlag    = flag.Uint64("first", 1, "first seed of a -seeds run")
	durationFlag = flag.Duration("duration", 30*time.Second, "cluster time of each seed's fault phase")
	untilFlag    = flag.Bool("until-caught", false, "run no further seed once one reported a violation (TestMutants)")
	realFlag     = flag.Duration("seed-timeout", 5*time.Minute, "real time one seed may take; a seed still running then fails the run")
)

// seeds returns the seeds this invocation runs.
func seeds() []uint64 {
	if *seedFlag != 0 {
		return []uint64{*seedFlag}
	}
	out := make([]uint64, *seedsFlag)
	for i := range out {
		out[i] = *firstFlag + uint64(i)
	}
	return out
}

// TestSim runs the fault schedules. A failing seed prints the command that
// replays it and keeps its history, fault log and porcupine visualization.
// Across a run of twenty or more seeds, every fault and outcome family must
// have fired, and the unfenced control resource must have lost writes.
func TestSim(t *testing.T) {
	var mu sync.Mutex // protects total, runs and caught
	var total Counters
	var runs int
	var caught bool
	t.Run("seeds", func(t *testing.T) {
		for _, seed := range seeds() {
			t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
				t.Parallel()
				mu.Lock()
				stop := *untilFlag && caught
				mu.Unlock()
				if stop {
					return // a mutant run that already caught its mutant
				}
				runSeed(t, seed, func(rep Report) {
					mu.Lock()
					defer mu.Unlock()
					total.Add(rep.Counters)
					runs++
					caught = caught || len(rep.Violations) > 0
				})
			})
		}
	})
	t.Logf("%d seeds: %v failover_ms p50=%d p99=%d", runs, total, percentile(total.FailoverMs, 50), percentile(total.FailoverMs, 99))
	if runs < 20 {
		return
	}
	for name, n := range map[string]int{
		"leader changes": total.LeaderChanges, "expiries": total.Expiries, "stale-token rejections": total.StaleRejections,
		"snapshot installs": total.SnapshotInstalls, "partitions": total.Partitions, "one-way cuts": total.OneWayCuts,
		"delays": total.Delays, "drops": total.Drops, "crashes": total.Crashes, "power losses": total.PowerLosses, "writes lost without fencing": total.LostUnfenced,
		"leadership transfers": total.Transfers, "pauses": total.Pauses, "renewals refused by a resumed leader": total.ResumedRefusals,
	} {
		if n == 0 {
			t.Errorf("coverage: no %s across %d seeds", name, runs)
		}
	}
}

// runSeed runs one seed in a synctest bubble and reports a violation with
// the command that replays it.
func runSeed(t *testing.T, seed uint64, done func(Report)) {
	guard := time.AfterFunc(*realFlag, func() { stuck(seed) })
	defer guard.Stop()
	var rep Report
	synctest.Test(t, func(t *testing.T) {
		rep = Run(Config{Seed: seed, Duration: *durationFlag, CheckP7: true, CheckP10: true})
	})
	rep.Check()
	if testing.Verbose() {
		t.Logf("seed %d: %v failover_ms %v", seed, rep.Counters, rep.Counters.FailoverMs)
	}
	done(rep)
	if len(rep.Undecided) > 0 && len(rep.Violations) == 0 {
		dir := saveFailure(t, rep)
		t.Logf("seed %d: UNDECIDED (not verified, no violation found)\n  %s\nreplay: go test -tags leasehold_sim ./internal/harness/sim -run 'TestSim$' -seed %d\nhistory and visualization: %s",
			seed, strings.Join(rep.Undecided, "\n  "), seed, dir)
	}
	if len(rep.Violations) > 0 {
		dir := saveFailure(t, rep)
		t.Errorf("seed %d: VIOLATION\n  %s\nreplay: go test -tags leasehold_sim ./internal/harness/sim -run 'TestSim$' -seed %d\nhistory and visualization: %s\ncounters: %v",
			seed, strings.Join(rep.Violations, "\n  "), seed, dir, rep.Counters)
	}
}

// stuck ends a run whose seed did not finish within -seed-timeout of real
// time (a livelock: virtual time advancing without end, or a goroutine
// spinning): it prints the command that replays the seed and where every
// goroutine's stack was saved, and exits the test binary with a failure.
func stuck(seed uint64) {
	buf := make([]byte, 64<<20)
	buf = buf[:runtime.Stack(buf, true)]
	where := "(not saved)"
	if f, err := os.CreateTemp(os.Getenv("LEASEHOLD_SIM_FAILDIR"), fmt.Sprintf("leasehold-sim-seed-%d-stuck-*.txt", seed)); err == nil {
		_, _ = f.Write(buf)
		_ = f.Close()
		where = f.Name()
	}
	fmt.Fprintf(os.Stderr, "seed %d: STUCK: not finished after %v of real time\nreplay: go test -tags leasehold_sim ./internal/harness/sim -run 'TestSim$' -seed %d\ngoroutines: %s\n", seed, *realFlag, seed, where)
	os.Exit(1)
}

// TestSimSkewBeyondBound runs W3 with lease clocks up to 20 % off, beyond
// the 2 % drift bound: an early expiry (P7) may then happen and is only
// counted, but every other property must still hold.
func TestSimSkewBeyondBound(t *testing.T) {
	var early int
	for seed := uint64(9001); seed < 9004; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			guard := time.AfterFunc(*realFlag, func() { stuck(seed) })
			defer guard.Stop()
			var rep Report
			synctest.Test(t, func(t *testing.T) {
				rep = Run(Config{Seed: seed, Duration: *durationFlag, Skew: 0.2})
			})
			rep.Check()
			early += rep.Counters.EarlyExpiries
			if len(rep.Violations) > 0 {
				dir := saveFailure(t, rep)
				t.Errorf("seed %d (skew 20%%): VIOLATION\n  %s\nhistory: %s", seed, strings.Join(rep.Violations, "\n  "), dir)
			}
		})
	}
	t.Logf("early expiries with 20%% skew: %d", early)
}

func percentile(v []int64, p int) int64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// saveFailure writes a failing seed's fault log, histories and porcupine's
// HTML visualizations to a directory that outlives the test (under
// $LEASEHOLD_SIM_FAILDIR when set, else the system's temp dir).
func saveFailure(t *testing.T, rep Report) string {
	dir, err := os.MkdirTemp(os.Getenv("LEASEHOLD_SIM_FAILDIR"), fmt.Sprintf("leasehold-sim-seed-%d-", rep.Seed))
	if err != nil {
		t.Logf("keep failure: %v", err)
		return "(not saved)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d\n\nviolations:\n  %s\n\nfaults:\n", rep.Seed, strings.Join(rep.Violations, "\n  "))
	for _, l := range rep.Log {
		fmt.Fprintln(&b, " ", l)
	}
	fmt.Fprintln(&b, "\nlock history (call, return — the history's event counter —, client, op):")
	for _, op := range rep.lockOps {
		fmt.Fprintf(&b, "  %d %d c%d %s\n", op.Call, op.Return, op.ClientId, linz.LockModel.DescribeOperation(op.Input, op.Output))
	}
	fmt.Fprintln(&b, "\nput history:")
	for _, op := range rep.putOps {
		fmt.Fprintf(&b, "  %d %d c%d %s\n", op.Call, op.Return, op.ClientId, linz.RegisterModel.DescribeOperation(op.Input, op.Output))
	}
	_ = os.WriteFile(filepath.Join(dir, "history.txt"), []byte(b.String()), 0o644)
	if v := rep.lockRes.Verdict; v == porcupine.Illegal || v == porcupine.Unknown {
		_ = rep.lockRes.Visualize(filepath.Join(dir, "locks.html"))
	}
	if v := rep.putRes.Verdict; v == porcupine.Illegal || v == porcupine.Unknown {
		_ = rep.putRes.Visualize(filepath.Join(dir, "kv.html"))
	}
	return dir
}
