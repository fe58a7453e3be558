package fsm

// Mutant: the fenced KV accepts every token, stale ones included.
func staleKV(_, _ uint64, _ bool) bool { return false }
