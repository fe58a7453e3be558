package lessor

import "time"

// The lessor's deadline decisions each live in a seam_*.go file of their
// own, so that the simulation's mutation test can replace one file with a
// broken version (internal/harness/sim/testdata/mutants) and prove it catches the
// bug; normal builds compile these files as they are.

// renewTo is a session's deadline after a renewal: never earlier.
func renewTo(cur, proposed time.Time) time.Time {
	if proposed.After(cur) {
		return proposed
	}
	return cur
}
