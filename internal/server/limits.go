package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/clock"
)

// Limits bound what one node accepts from its clients, so that a flood of
// connections, streams, sessions, requests or bytes is refused with
// resource-exhausted instead of taking the node's memory or CPU. A zero
// count, rate or timeout means no limit. Every limit is per node except
// SessionsPerPrincipal, which the leader enforces.
type Limits struct {
	// RequestBytes bounds one request message: a body announced larger is
	// refused before it is read, a chunked body is cut at the limit, and a
	// compressed message is bounded after decompression.
	RequestBytes int64
	// Conns bounds the open client connections; one more is answered with
	// an HTTP 429 and closed. With TLS a connection counts once its
	// handshake is done (connlimit.go).
	Conns int
	// ConnsPerAddress bounds the open connections from one remote address
	// (an IPv4 address, or an IPv6 /64), in their TLS handshake or not.
	ConnsPerAddress int
	// ConnsPerPrincipal bounds the open connections of one verified client
	// certificate's principal (node certificates are not counted).
	ConnsPerPrincipal int
	// HandshakesPerAddress and Handshakes bound the connections in their
	// TLS handshake, from one address and on the node.
	HandshakesPerAddress, Handshakes int
	// HandshakeTimeout closes a connection whose TLS handshake is not done
	// in time.
	HandshakeTimeout time.Duration
	// IdleTimeout closes a connection with no request in flight.
	IdleTimeout time.Duration
	// ReadHeaderTimeout bounds reading a request's headers (and a new
	// connection's first bytes).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading the body of a unary request. Streams
	// (Watch, KeepAliveStream) have no read deadline.
	ReadTimeout time.Duration
	// Watches and WatchesPerPrincipal bound the open Watch streams.
	Watches, WatchesPerPrincipal int
	// KeepAliveStreams and KeepAliveStreamsPerPrincipal bound the open
	// KeepAliveStream streams.
	KeepAliveStreams, KeepAliveStreamsPerPrincipal int
	// SessionsPerPrincipal bounds the live sessions one principal created.
	SessionsPerPrincipal int
	// QueuedPerSession and QueuedPerPrincipal bound the Acquires parked here (queuecap.go).
	QueuedPerSession, QueuedPerPrincipal int
	// Rate is the requests per second one principal may send on average,
	// with bursts of up to Burst; renewals (KeepAlive, KeepAliveStream)
	// are not counted.
	Rate  float64
	Burst int
	// ListRate is the listed entries per second one principal may read on
	// average, with bursts of up to ListBurst: a List is charged the locks
	// it returns, a Watch ended with compacted the locks of the state it
	// sends, a ListSessions the sessions it returns (meter.go).
	ListRate  float64
	ListBurst int
	// WatchOpenRate is the Watch streams per second one principal may
	// open on average, with bursts of up to WatchOpenBurst.
	WatchOpenRate  float64
	WatchOpenBurst int
	// RenewRate is the lease ids per second one principal may renew on
	// average (KeepAlive, each KeepAliveStream message), with bursts of up
	// to RenewBurst.
	RenewRate  float64
	RenewBurst int
}

// DefaultLimits returns the limits `leasehold serve` starts with.
func DefaultLimits() Limits {
	return Limits{
		RequestBytes:                 MaxRequestSize,
		Conns:                        4096,
		ConnsPerAddress:              1024,
		ConnsPerPrincipal:            1024,
		HandshakesPerAddress:         64,
		Handshakes:                   1024,
		HandshakeTimeout:             10 * time.Second,
		IdleTimeout:                  2 * time.Minute,
		ReadHeaderTimeout:            10 * time.Second,
		ReadTimeout:                  10 * time.Second,
		Watches:                      4096,
		WatchesPerPrincipal:          512,
		KeepAliveStreams:             4096,
		KeepAliveStreamsPerPrincipal: 512,
		SessionsPerPrincipal:         10000,
		QueuedPerSession:             1000,
		QueuedPerPrincipal:           10000,
		Rate:                         50000,
		Burst:                        100000,
		ListRate:                     10000, // the defaults of the meters: see newMeters
		ListBurst:                    20000,
		WatchOpenRate:                100,
		WatchOpenBurst:               512,
		RenewRate:                    60000,
		RenewBurst:                   60000,
	}
}

// limitFields names every limit as `serve --limit NAME=VALUE` spells it.
func (l *Limits) fields() map[string]any {
	return map[string]any{
		"request-bytes":                   &l.RequestBytes,
		"conns":                           &l.Conns,
		"conns-per-address":               &l.ConnsPerAddress,
		"conns-per-principal":             &l.ConnsPerPrincipal,
		"handshakes-per-address":          &l.HandshakesPerAddress,
		"handshakes":                      &l.Handshakes,
		"handshake-timeout":               &l.HandshakeTimeout,
		"idle-timeout":                    &l.IdleTimeout,
		"read-header-timeout":             &l.ReadHeaderTimeout,
		"read-timeout":                    &l.ReadTimeout,
		"watches":                         &l.Watches,
		"watches-per-principal":           &l.WatchesPerPrincipal,
		"keepalive-streams":               &l.KeepAliveStreams,
		"keepalive-streams-per-principal": &l.KeepAliveStreamsPerPrincipal,
		"sessions-per-principal":          &l.SessionsPerPrincipal,
		"queued-per-session":              &l.QueuedPerSession,
		"queued-per-principal":            &l.QueuedPerPrincipal,
		"rate":                            &l.Rate,
		"burst":                           &l.Burst,
		"list-rate":                       &l.ListRate,
		"list-burst":                      &l.ListBurst,
		"watch-open-rate":                 &l.WatchOpenRate,
		"watch-open-burst":                &l.WatchOpenBurst,
		"renew-rate":                      &l.RenewRate,
		"renew-burst":                     &l.RenewBurst,
	}
}

// LimitNames returns the names Set accepts, sorted.
func LimitNames() []string {
	var l Limits
	var names []string
	for n := range l.fields() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Get returns the limit name as Set reads it ("" for an unknown name).
func (l *Limits) Get(name string) string {
	switch p := l.fields()[name].(type) {
	case *int:
		return strconv.Itoa(*p)
	case *float64:
		return strconv.FormatFloat(*p, 'g', -1, 64)
	case *time.Duration:
		return p.String()
	case *int64:
		if *p%(1<<20) == 0 && *p > 0 {
			return strconv.FormatInt(*p>>20, 10) + "MiB"
		}
		return strconv.FormatInt(*p, 10)
	}
	return ""
}

// Set sets the limit name (as LimitNames spells it) from value: a count,
// a rate, a byte count (with KiB, MiB or GiB) or a duration ("90s").
func (l *Limits) Set(name, value string) error {
	p, ok := l.fields()[name]
	if !ok {
		return fmt.Errorf("unknown limit %q; the limits are %s", name, strings.Join(LimitNames(), ", "))
	}
	var err error
	switch p := p.(type) {
	case *int:
		*p, err = strconv.Atoi(value)
	case *float64:
		*p, err = strconv.ParseFloat(value, 64)
	case *time.Duration:
		*p, err = time.ParseDuration(value)
	case *int64:
		*p, err = ParseBytes(value)
	}
	if err != nil {
		return fmt.Errorf("limit %s=%q: %w", name, value, err)
	}
	return nil
}

// ParseBytes reads a byte count: an integer ≥ 0, optionally with KiB, MiB
// or GiB.
func ParseBytes(s string) (int64, error) {
	mult := int64(1)
	for suffix, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if v, ok := strings.CutSuffix(s, suffix); ok {
			s, mult = strings.TrimSpace(v), m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a byte count (an integer, optionally with KiB, MiB or GiB)", s)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("%s%s is too large", s, map[int64]string{1: "", 1 << 10: "KiB", 1 << 20: "MiB", 1 << 30: "GiB"}[mult])
	}
	return n * mult, nil
}

// Validate reports the first limit that is negative or below its floor.
func (l Limits) Validate() error {
	for _, name := range LimitNames() {
		var neg bool
		switch p := l.fields()[name].(type) {
		case *int:
			neg = *p < 0
		case *int64:
			neg = *p < 0
		case *float64:
			neg = *p < 0 || *p != *p
		case *time.Duration:
			neg = *p < 0
		}
		if neg {
			return fmt.Errorf("server: limit %s is negative", name)
		}
	}
	if l.RequestBytes != 0 && l.RequestBytes < 4<<10 {
		return fmt.Errorf("server: limit request-bytes=%d is below its floor of 4096 (a request must fit a lock name, a lease id and a header)", l.RequestBytes)
	}
	if l.Rate > 0 && l.Burst < 1 {
		return errors.New("server: limit rate is set but burst is 0; a burst of at least 1 is needed")
	}
	if err := l.validateMeters(); err != nil {
		return err
	}
	return nil
}

// exhausted is the refusal of limit name: it says what ran out and how to
// raise it.
func exhausted(name string, format string, args ...any) *api.Error {
	return api.Errorf(api.CodeResourceExhausted, "%s; raise it with serve --limit %s=N", fmt.Sprintf(format, args...), name)
}

// limiter enforces Limits on one node.
type limiter struct {
	cfg   Limits
	clock clock.Clock

	refused *prometheus.CounterVec
	conns   atomic.Int64 // open connections

	watches, keepalives *gate
	queued              *parkedAcquires
	meters              meters // the per-principal cost meters (meter.go)

	mu      sync.Mutex          // protects following
	buckets map[string]*bucket  // per principal
	owned   map[string]ownedSet // sessions created through this node, per principal; no empty sets
	ownerOf map[string]string   // the principal of every session in owned
	stale   bool                // owned may hold sessions that ended unseen (restored)
}

func newLimiter(cfg Limits, clk clock.Clock, reg prometheus.Registerer) (*limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &limiter{
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
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "leasehold_connections", Help: "Open client connections (serve --limit conns)."},
		func() float64 { return float64(l.conns.Load()) })
	for _, c := range []prometheus.Collector{l.refused, open} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return l, nil
}

func (l *limiter) refuse(name string) { l.refused.WithLabelValues(name).Inc() }

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
		return nil, g.name, exhausted(g.name, "%d %s are open on this node, the limit", g.total, g.what)
	}
	if name := g.name + "-per-principal"; g.per > 0 && g.by[p] >= g.per {
		return nil, name, exhausted(name, "principal %s has %d %s open on this node, the limit", p, g.by[p], g.what)
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

// stream admits a Watch or KeepAliveStream of the caller in ctx.
func (l *limiter) stream(ctx context.Context, g *gate) (func(), error) {
	release, name, err := g.enter(principal(ctx))
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

// allowOp meters one operation of p against the request rate: an HTTP
// request, or one message of a LockStream (lockstream.go). A refusal is
// counted under the limit "rate".
func (l *limiter) allowOp(p string) *api.Error {
	err := l.allow(p)
	if err != nil {
		l.refuse("rate")
	}
	return err
}

// allow takes one token of p's bucket, or refuses.
func (l *limiter) allow(p string) *api.Error {
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
		return exhausted("rate", "rate limit of %g req/s (burst %d) for principal %s exceeded", l.cfg.Rate, l.cfg.Burst, p)
	}
	b.tokens--
	return nil
}

// sweepBucketsLocked drops the buckets that have refilled: a full bucket
// is the same as none.
func (l *limiter) sweepBucketsLocked(now time.Time) {
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

// limitHandler enforces the per-request limits around h: it names the
// principal, meters its rate, bounds the request body and sets the body's
// read deadline.
func (s *Server) limitHandler(h http.Handler) http.Handler {
	l := s.lim
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
		p := principalOf(r, s.mayForward)
		if !unmetered[r.URL.Path] {
			if err := l.allowOp(p); err != nil {
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
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}
