//go:build mutant_token_local

package fsm

import "sync"

// Mutant: a token counter per name instead of one for every grant.
func init() {
	var mu sync.Mutex
	counters := map[*Machine]map[string]uint64{}
	nextToken = func(m *Machine, name string) uint64 {
		mu.Lock()
		defer mu.Unlock()
		c := counters[m]
		if c == nil {
			c = map[string]uint64{}
			counters[m] = c
		}
		c[name]++
		m.token = max(m.token, c[name])
		return c[name]
	}
}
