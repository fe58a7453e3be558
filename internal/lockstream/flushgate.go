package lockstream

import (
	"context"
	"net/http"
	"sync"

	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
)

// flushGate lets a LockStream write several answers before the response
// is flushed: while held, Flush only notes that one is due.
type flushGate struct {
	http.ResponseWriter

	mu   sync.Mutex // protects following
	held bool
	due  bool
}

type flushGateKey struct{}

// WithFlushGate gives the LockStream handler under next a flushGate
// (through the request's context), so that Serve flushes once per batch of
// answers; every other request passes through untouched.
func WithFlushGate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != leaseholdv1connect.LeaseholdServiceLockStreamProcedure {
			next.ServeHTTP(w, r)
			return
		}
		g := &flushGate{ResponseWriter: w}
		next.ServeHTTP(g, r.WithContext(context.WithValue(r.Context(), flushGateKey{}, g)))
	})
}

func (g *flushGate) Flush() {
	if g == nil {
		return
	}
	g.mu.Lock()
	if g.held {
		g.due = true
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	if f, ok := g.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the writer underneath.
func (g *flushGate) Unwrap() http.ResponseWriter { return g.ResponseWriter }

func (g *flushGate) hold() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.held = true
	g.mu.Unlock()
}

// release ends a hold and flushes once if a Flush came during it.
func (g *flushGate) release() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.held = false
	due := g.due
	g.due = false
	g.mu.Unlock()
	if due {
		g.Flush()
	}
}
