package fsm

import "sync"

// Mutant: a token counter per name instead of one for every grant.
var (
	localMu       sync.Mutex
	localCounters = map[*Machine]map[string]uint64{}
)

func nextToken(m *Machine, name string) uint64 {
	localMu.Lock()
	defer localMu.Unlock()
	c := localCounters[m]
	if c == nil {
		c = map[string]uint64{}
		localCounters[m] = c
	}
	c[name]++
	m.token = max(m.token, c[name])
	return c[name]
}
