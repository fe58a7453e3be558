package e2e

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNormalStartAndStopLogNoWarnings: a 3-node cluster that starts, elects
// a leader, serves and stops with SIGTERM logs nothing at WARN or above on
// any node: an operator who alerts on ERROR is not paged on every deploy.
func TestNormalStartAndStopLogNoWarnings(t *testing.T) {
	procs := startCluster(t, 3)
	for _, p := range procs {
		waitHealthy(t, p.api)
	}
	var held map[string]any
	cli(t, &held, "acquire", "quiet:lock", "--endpoints", endpoints(procs))
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, p := range procs {
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Until(deadline)):
			t.Fatalf("%s did not stop within 20 s of SIGTERM", p.id)
		}
		p.cmd = nil
	}
	for _, p := range procs {
		b, err := os.ReadFile(p.log.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
				t.Errorf("%s logged on a normal start and stop: %s", p.id, line)
			}
		}
	}
}
