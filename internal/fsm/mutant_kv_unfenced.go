//go:build mutant_kv_unfenced

package fsm

// Mutant: the fenced KV accepts every token, stale ones included.
func init() { staleKV = func(_, _ uint64, _ bool) bool { return false } }
