//go:build leasehold_sim

package sim

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// mutants are the build tags of known bugs (files mutant_<name>.go in the
// package each mutates). The simulation must catch every one.
var mutants = []string{
	"mutant_release_token",     // internal/fsm: release ignores the token
	"mutant_kv_unfenced",       // internal/fsm: the fenced KV accepts stale tokens
	"mutant_token_local",       // internal/fsm: one token counter per name
	"mutant_renew_ignored",     // internal/lessor: keepalives do not move the deadline
	"mutant_promote_early",     // internal/lessor: a new leader expires live sessions at once
	"mutant_acquire_dedup",     // internal/fsm: a repeated Acquire of a held name is a new request
	"mutant_read_any",          // internal/sim: reads served by any node, no leadership check
	"mutant_resource_reads",    // internal/sim: the resource checks tokens on writes only
	"mutant_outcome_lost",      // internal/sim: an entry whose leader was deposed is reported not applied
	"mutant_waiter_session",    // internal/fsm: an ended session stays queued and is granted
	"mutant_renew_unconfirmed", // internal/lessor: a keepalive answered without a leadership confirmation
	"mutant_read_unconfirmed",  // internal/sim: a read answered by a leader without a leadership confirmation
	"mutant_revive_expiring",   // internal/lessor: a session whose expiry was proposed is renewed
	"mutant_reentrant_mode",    // internal/fsm: a session's request in another mode gets its holding back
	"mutant_withdraw_moved",    // internal/fsm: a re-entrant acquire's withdrawal releases the holding
}

// TestMutants builds the simulation with each mutant and asserts that one
// of up to 48 seeds reports a violation (the run stops at the first). A mutant that survives is a hole in the
// suite.
func TestMutants(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the mutants: %v", err)
	}
	for _, tag := range mutants {
		t.Run(tag, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), goBin, "test", "-count=1", "-tags", "leasehold_sim,"+tag, ".", "-run", "TestSim$", "-seeds", "48", "-until-caught", "-duration", "30s", "-timeout", "15m")
			cmd.Env = append(os.Environ(), "LEASEHOLD_SIM_FAILDIR="+t.TempDir())
			out, err := cmd.CombinedOutput()
			at := caught(string(out))
			if err == nil || at < 0 {
				t.Errorf("mutant %s survived (err %v):\n%s", tag, err, tail(string(out), 2000))
				return
			}
			first := string(out)[at:]
			t.Logf("caught: %s", tail(first[:min(len(first), 400)], 400))
		})
	}
}

// caught returns where the output of a mutant's run shows it caught, or
// -1: a seed's VIOLATION, or a panic of the state machine's Apply (P9),
// which the nodes run as the server does, on raft's apply goroutine,
// where nothing recovers it: the run ends there, as the server would.
func caught(out string) int {
	if i := strings.Index(out, "VIOLATION"); i >= 0 {
		return i
	}
	if i := strings.Index(out, "panic: "); i >= 0 && strings.Contains(out[i:], "internal/fsm.(*Machine).Apply(") {
		return i
	}
	return -1
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
