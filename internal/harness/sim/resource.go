//go:build leasehold_sim

package sim

import (
	"slices"
	"sync"

	"github.com/leasehold/leasehold/fence"
)

// resource is a protected set per key, read for update and written back by
// lock holders. Fenced, it admits a read or a write with token t only when
// fence.Monotonic admits t over the key's high-water, and raises the
// high-water to t: a holder that read under an old token cannot write
// over a newer holder's read. Unfenced, it admits everything — the
// control that shows the workload's paused holders do overwrite.
type resource struct {
	fenced bool

	mu   sync.Mutex // protects following
	keys map[string]*register
}

type register struct {
	last  uint64
	set   []int
	acked []int // elements whose write was acknowledged
}

func newResource(fenced bool) *resource {
	return &resource{fenced: fenced, keys: map[string]*register{}}
}

func (r *resource) admit(key string, token uint64) (*register, bool) {
	g := r.keys[key]
	if g == nil {
		g = &register{}
		r.keys[key] = g
	}
	if r.fenced && !fence.Monotonic.Admits(token, g.last) {
		return g, false
	}
	g.last = max(g.last, token)
	return g, true
}

// read returns key's set for an update under token.
func (r *resource) read(key string, token uint64) ([]int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !fenceReads {
		g, _ := r.admit(key, 0)
		return slices.Clone(g.set), true
	}
	g, ok := r.admit(key, token)
	return slices.Clone(g.set), ok
}

// write replaces key's set with set, which adds elem, under token.
func (r *resource) write(key string, token uint64, set []int, elem int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	g, ok := r.admit(key, token)
	if ok {
		g.set = set
		g.acked = append(g.acked, elem)
	}
	return ok
}

// lost returns, per key, the acknowledged elements missing from its set.
func (r *resource) lost() map[string][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]int{}
	for k, g := range r.keys {
		for _, e := range g.acked {
			if !slices.Contains(g.set, e) {
				out[k] = append(out[k], e)
			}
		}
	}
	return out
}
