//go:build leasehold_sim

package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// mutants are the known bugs the simulation must catch. A bug in a
// production package (fsm, lessor) is a directory testdata/mutants/NAME
// holding, at their paths from the module root, the files it replaces (a
// seam_*.go file of that package, broken); the build overlays them (go
// build -overlay), so production code carries no mutation hooks. A bug in
// the simulation's own read path or resource is a file mutant_NAME.go of
// this package with the build tag mutant_NAME.
var mutants = []string{
	"release_token",     // internal/fsm: release ignores the token
	"kv_unfenced",       // internal/fsm: the fenced KV accepts stale tokens
	"token_local",       // internal/fsm: one token counter per name
	"renew_ignored",     // internal/lessor: keepalives do not move the deadline
	"promote_early",     // internal/lessor: a new leader expires live sessions at once
	"acquire_dedup",     // internal/fsm: a repeated Acquire of a held name is a new request
	"read_any",          // internal/harness/sim: reads served by any node, no leadership check
	"resource_reads",    // internal/harness/sim: the resource checks tokens on writes only
	"outcome_lost",      // internal/harness/sim: an entry whose leader was deposed is reported not applied
	"waiter_session",    // internal/fsm: an ended session stays queued and is granted
	"renew_unconfirmed", // internal/lessor: a keepalive answered without a leadership confirmation
	"read_unconfirmed",  // internal/harness/sim: a read answered by a leader without a leadership confirmation
	"revive_expiring",   // internal/lessor: a session whose expiry was proposed is renewed
	"reentrant_mode",    // internal/fsm: a session's request in another mode gets its holding back
	"withdraw_moved",    // internal/fsm: a re-entrant acquire's withdrawal releases the holding
}

// TestMutants builds the simulation with each mutant and asserts that one
// of up to 48 seeds reports a violation (the run stops at the first). A mutant that survives is a hole in the
// suite.
func TestMutants(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the mutants: %v", err)
	}
	for _, name := range mutants {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			build, err := mutantBuild(name, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			args := append([]string{"test", "-count=1"}, build...)
			args = append(args, ".", "-run", "TestSim$", "-seeds", "48", "-until-caught", "-duration", "30s", "-timeout", "15m")
			cmd := exec.CommandContext(t.Context(), goBin, args...)
			cmd.Env = append(os.Environ(), "LEASEHOLD_SIM_FAILDIR="+t.TempDir())
			out, err := cmd.CombinedOutput()
			at := caught(string(out))
			if err == nil || at < 0 {
				t.Errorf("mutant %s survived (err %v):\n%s", name, err, tail(string(out), 2000))
				return
			}
			first := string(out)[at:]
			t.Logf("caught: %s", tail(first[:min(len(first), 400)], 400))
		})
	}
}

// mutantBuild returns the build flags of mutant name: an overlay of the
// files under testdata/mutants/NAME (written to dir), or its build tag.
func mutantBuild(name, dir string) ([]string, error) {
	root, err := filepath.Abs(filepath.Join("testdata", "mutants", name))
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(root); errors.Is(err, fs.ErrNotExist) {
		return []string{"-tags", "leasehold_sim,mutant_" + name}, nil
	}
	module, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		return nil, err
	}
	replace := map[string]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		target := filepath.Join(module, rel)
		if _, err := os.Stat(target); err != nil {
			return fmt.Errorf("mutant %s replaces %s, which does not exist: %w", name, rel, err)
		}
		replace[target] = path
		return nil
	})
	if err != nil {
		return nil, err
	}
	overlay, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		return nil, err
	}
	file := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(file, overlay, 0o644); err != nil {
		return nil, err
	}
	return []string{"-tags", "leasehold_sim", "-overlay", file}, nil
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
