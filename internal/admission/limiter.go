package admission

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/clock"
)

// Limiter enforces Limits on one node. Its methods are safe for
// concurrent use.
type Limiter struct {
	cfg   Limits
	clock clock.Clock

	refused *prometheus.CounterVec
	conns   atomic.Int64 // open connections

	watches, keepalives *gate
	queued              *parkedAcquires
	meters              meters  // the per-principal cost meters (meter.go)
	shares              *shares // the running and waiting requests per principal (shares.go)

	mu      sync.Mutex          // protects following
	buckets map[string]*bucket  // per principal
	owned   map[string]ownedSet // sessions created through this node, per principal; no empty sets
	ownerOf map[string]string   // the principal of every session in owned
	stale   bool                // owned may hold sessions that ended unseen ((Restored))
}

// New makes the limiter of cfg, registering its metrics
// (leasehold_limit_refused_total, leasehold_connections) with reg.
func New(cfg Limits, clk clock.Clock, reg prometheus.Registerer) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Limiter{
		cfg:   cfg,
		clock: clk,
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_limit_refused_total",
			Help: "Requests, streams and connections refused by a limit (serve --limit), by limit name.",
		}, []string{"limit"}),
		buckets: map[string]*bucket{},
		owned:   map[string]ownedSet{},
		ownerOf: map[string]string{},
	}
	l.watches = newGate("watches", cfg.Watches, cfg.WatchesPerPrincipal, "watch streams")
	l.keepalives = newGate("keepalive-streams", cfg.KeepAliveStreams, cfg.KeepAliveStreamsPerPrincipal, "keepalive streams")
	l.queued = newParkedAcquires(cfg.QueuedPerSession, cfg.QueuedPerPrincipal)
	l.meters = newMeters(cfg, clk, l.refuse)
	l.shares = newShares(cfg.ConcurrentPerPrincipal, cfg.WaitingPerPrincipal)
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "leasehold_connections", Help: "Open client connections (serve --limit conns)."},
		func() float64 { return float64(l.conns.Load()) })
	for _, c := range []prometheus.Collector{l.refused, open} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return l, nil
}

func (l *Limiter) refuse(name string) { l.refused.WithLabelValues(name).Inc() }

// gate counts open streams of one kind, in total and per principal.
type gate struct {
	name, what string
	max, per   int

	mu    sync.Mutex     // protects following
	total int            // open streams
	by    map[string]int // open streams per principal; no zero entries
}

func newGate(name string, max, per int, what string) *gate {
	return &gate{name: name, what: what, max: max, per: per, by: map[string]int{}}
}

// enter admits one more stream of p, or refuses it naming the limit hit.
// The returned func releases the stream; call it exactly once.
func (g *gate) enter(p string) (func(), string, *api.Error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.max > 0 && g.total >= g.max {
		return nil, g.name, Exhausted(g.name, "%d %s are open on this node, the limit", g.total, g.what)
	}
	if name := g.name + "-per-principal"; g.per > 0 && g.by[p] >= g.per {
		return nil, name, Exhausted(name, "principal %s has %d %s open on this node, the limit", p, g.by[p], g.what)
	}
	g.total++
	g.by[p]++
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.total--
			if g.by[p]--; g.by[p] == 0 {
				delete(g.by, p)
			}
		})
	}, "", nil
}

// Limits returns the limits l enforces.
func (l *Limiter) Limits() Limits { return l.cfg }

// KeepAliveStream admits a KeepAliveStream of the caller in ctx
// (keepalive-streams, keepalive-streams-per-principal). The returned func
// releases its place.
func (l *Limiter) KeepAliveStream(ctx context.Context) (func(), error) {
	return l.stream(ctx, l.keepalives)
}

// stream admits a Watch or KeepAliveStream of the caller in ctx.
func (l *Limiter) stream(ctx context.Context, g *gate) (func(), error) {
	release, name, err := g.enter(Principal(ctx))
	if err != nil {
		l.refuse(name)
		return nil, api.ToConnect(err)
	}
	return release, nil
}

// bucket is one principal's token bucket.
type bucket struct {
	tokens float64
	at     time.Time // when tokens was computed
}

// maxBuckets bounds the principals with a bucket of their own; beyond it
// the newest principals share one, so a client that invents principals
// costs memory only up to here.
const maxBuckets = 1 << 16

const sharedBucket = "(principals beyond the bucket table)"

// AllowOp meters one operation of p against the request rate: an HTTP
// request, or one message of a LockStream. A refusal is
// counted under the limit "rate".
func (l *Limiter) AllowOp(p string) *api.Error {
	err := l.allow(p)
	if err != nil {
		l.refuse("rate")
	}
	return err
}

// allow takes one token of p's bucket, or refuses.
func (l *Limiter) allow(p string) *api.Error {
	if l.cfg.Rate <= 0 {
		return nil
	}
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[p]
	if !ok {
		if len(l.buckets) >= maxBuckets {
			l.sweepBucketsLocked(now)
		}
		if len(l.buckets) >= maxBuckets {
			p = sharedBucket
			b = l.buckets[p]
		}
		if b == nil {
			b = &bucket{tokens: float64(l.cfg.Burst), at: now}
			l.buckets[p] = b
		}
	}
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(float64(l.cfg.Burst), b.tokens+d.Seconds()*l.cfg.Rate)
		b.at = now
	}
	if b.tokens < 1 {
		return Exhausted("rate", "rate limit of %g req/s (burst %d) for principal %s exceeded", l.cfg.Rate, l.cfg.Burst, p)
	}
	b.tokens--
	return nil
}

// sweepBucketsLocked drops the buckets that have refilled: a full bucket
// is the same as none.
func (l *Limiter) sweepBucketsLocked(now time.Time) {
	for p, b := range l.buckets {
		if b.tokens+now.Sub(b.at).Seconds()*l.cfg.Rate >= float64(l.cfg.Burst) {
			delete(l.buckets, p)
		}
	}
}

// unmetered are the paths the request rate does not count: renewals
// touch only the leader's memory and must never be the reason a
// well-behaved session expires (renew-rate meters their ids instead, with
// room for every session a principal may have; meter.go), and a probe or
// scrape must not fail because another client on the same host floods.
var unmetered = map[string]bool{
	"/healthz":                     true,
	"/readyz":                      true,
	"/metrics":                     true,
	"/grpc.health.v1.Health/Check": true,
	leaseholdv1connect.LeaseholdServiceKeepAliveProcedure:       true,
	leaseholdv1connect.LeaseholdServiceKeepAliveStreamProcedure: true,
}

// bidi are the procedures whose request body is a stream of messages
// without end; only each message is bounded.
var bidi = map[string]bool{
	leaseholdv1connect.LeaseholdServiceKeepAliveStreamProcedure: true,
	leaseholdv1connect.LeaseholdServiceLockStreamProcedure:      true,
}

// streams are the procedures that may run without end; their body has no
// read deadline (on HTTP/1.1 an expired one would end the call).
var streams = map[string]bool{
	leaseholdv1connect.LeaseholdServiceKeepAliveStreamProcedure: true,
	leaseholdv1connect.LeaseholdServiceWatchProcedure:           true,
	leaseholdv1connect.LeaseholdServiceLockStreamProcedure:      true,
}

// Handler enforces the per-request limits around h: it names the
// principal (principalOf, stored for Principal), meters its rate, bounds
// the request body, sets the body's read deadline and runs a unary
// request in its principal's share (shares.go).
func (l *Limiter) Handler(h http.Handler, principalOf func(*http.Request) string) http.Handler {
	ew := connect.NewErrorWriter()
	write := func(w http.ResponseWriter, r *http.Request, err *api.Error) {
		if ew.IsSupported(r) {
			_ = ew.Write(w, r, api.ToConnect(err))
			return
		}
		http.Error(w, string(err.Code)+": "+err.Message, http.StatusTooManyRequests)
	}
	fail := func(w http.ResponseWriter, r *http.Request, name string, err *api.Error) {
		l.refuse(name)
		write(w, r, err)
	}
	bodyCap := l.cfg.RequestBytes
	if bodyCap > 0 {
		bodyCap += 5 // the envelope prefix of gRPC, gRPC-Web and Connect streams
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := principalOf(r)
		if !unmetered[r.URL.Path] {
			if err := l.AllowOp(p); err != nil {
				write(w, r, err)
				return
			}
		}
		if r.URL.Path == leaseholdv1connect.LeaseholdServiceKeepAliveProcedure {
			// A principal out of renewals is refused before its message
			// is read: decoding 10 000 lease ids costs the node more than
			// renewing them, and the meter would refuse them anyway.
			if err := l.meters.renewals.take(p, 0); err != nil {
				write(w, r, err)
				return
			}
		}
		if bodyCap > 0 && bidi[r.URL.Path] {
			r.Body = &envelopeCap{ReadCloser: r.Body, limit: l.cfg.RequestBytes}
		}
		if bodyCap > 0 && !bidi[r.URL.Path] {
			if r.ContentLength > bodyCap {
				// Nothing of the body is read; net/http closes an HTTP/1
				// connection rather than drain a body this large.
				fail(w, r, "request-bytes", tooLarge(r.ContentLength, l.cfg.RequestBytes))
				return
			}
			body := &cappedBody{ReadCloser: http.MaxBytesReader(w, r.Body, bodyCap), limit: l.cfg.RequestBytes}
			if l.cfg.ReadTimeout > 0 && !streams[r.URL.Path] {
				// The deadline covers the body only: once it is read the
				// call may wait (a queued Acquire) as long as it asks.
				rc := http.NewResponseController(w)
				if rc.SetReadDeadline(time.Now().Add(l.cfg.ReadTimeout)) == nil {
					body.read = func() { _ = rc.SetReadDeadline(time.Time{}) }
				}
			}
			r.Body = body
		}
		ctx := WithPrincipal(r.Context(), p)
		if !unmetered[r.URL.Path] && !streams[r.URL.Path] {
			t, err := l.shares.enter(ctx, p)
			if err != nil {
				if err.Code == api.CodeResourceExhausted {
					l.refuse("waiting-per-principal")
				}
				write(w, r, err)
				return
			}
			defer t.leave()
			ctx = context.WithValue(ctx, yieldKey{}, t)
		}
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p as the principal the limits count
// the caller under (Handler stores it for every request).
func WithPrincipal(ctx context.Context, p string) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// Principal returns the principal the limits handler stored in ctx ("" if
// none).
func Principal(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(string)
	return p
}
