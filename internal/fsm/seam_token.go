package fsm

// The state machine's core decisions each live in a seam_*.go file of their
// own, so that the simulation's mutation test can replace one file with a
// broken version (internal/harness/sim/testdata/mutants) and prove it catches the
// bug; normal builds compile these files as they are.

// nextToken advances the counter for a grant of name and returns the token:
// one counter for every grant of every name.
func nextToken(m *Machine, _ string) uint64 {
	m.token++
	return m.token
}
