package fsm

import "github.com/leasehold/leasehold/internal/fsm/fsmpb"

// LockPage describes up to limit locks whose name keep accepts, in name
// order, and reports whether more matched: List for a caller that may see
// only some names.
func (m *Machine) LockPage(keep func(name string) bool, limit int) ([]LockInfo, bool) {
	names, more := pageKeys(m.locks, "", "", keep, limit)
	out := make([]LockInfo, len(names))
	for i, n := range names {
		out[i] = m.Lock(n)
	}
	return out, more
}

// KVPage returns up to limit fenced keys (tombstones too) that have prefix,
// sort after after ("" from the first) and that keep accepts, in key order,
// and whether more matched. The entries are the state's own: read only.
func (m *Machine) KVPage(prefix, after string, keep func(key string) bool, limit int) ([]*fsmpb.KV, bool) {
	keys, more := pageKeys(m.kv, prefix, after, keep, limit)
	out := make([]*fsmpb.KV, len(keys))
	for i, k := range keys {
		out[i] = m.kv[k]
	}
	return out, more
}
