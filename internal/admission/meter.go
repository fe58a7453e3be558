package admission

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/internal/clock"
)

// A meter bounds what one principal's requests cost a node, where the
// request rate alone does not: a List of 1 000 locks costs a thousand
// times what a Status does, and one KeepAlive may renew 10 000 sessions.
// Each principal has a token bucket of cost units (listed entries, watch
// opens, renewed lease ids) that refills at rate units per second up to
// burst.
//
//	request ──► bucket of p ≥ 1? ──no──► resource-exhausted (nothing walked, nothing charged)
//	                  │yes
//	                  ▼
//	   charge its cost (the bucket may go below 0): up front when known
//	   (renewed ids, an open), else once the work is done (listed entries)
//
// A request is refused only when its principal's bucket is empty, before
// any of its work is done; an admitted one is charged in full even when
// that leaves the bucket in debt, which the rate repays before the next
// request of that principal is admitted. So the cost of one principal
// over any interval t is at most burst + rate·t + the cost of the
// requests admitted while it still had a unit (one, unless a List was in
// flight: a List is charged what it returned, not what it might have, so
// that small Lists are never refused for what large ones would cost),
// and a request larger than burst is still admitted on a full bucket.
type meter struct {
	name  string // the rate's name in Limits.fields(), named in every refusal
	unit  string // what one token pays for ("listed entries/s")
	rate  float64
	burst int
	clock clock.Clock
	count func(name string) // counts a refusal (Limiter.refuse)
	who   string            // what a bucket is kept for, in a refusal: "principal" (or "address")

	mu      sync.Mutex         // protects following
	buckets map[string]*bucket // per principal; a full bucket may be dropped
}

func newMeter(name, unit string, rate float64, burst int, clk clock.Clock, count func(string)) *meter {
	return &meter{name: name, unit: unit, rate: rate, burst: burst, clock: clk, count: count, who: "principal", buckets: map[string]*bucket{}}
}

// take admits a request of principal p that costs n units, or refuses it
// (counted under m.name) when p's bucket holds less than one unit.
func (m *meter) take(p string, n int) *api.Error {
	if m == nil || m.rate <= 0 {
		return nil
	}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.bucketLocked(p, now)
	if b.tokens < 1 {
		m.count(m.name)
		return Exhausted(m.name, "%s limit of %g %s (burst %d) for %s %s exceeded", m.name, m.rate, m.unit, m.burst, m.who, p)
	}
	b.tokens -= float64(n)
	return nil
}

// pace charges n units of p's bucket for work already done, even below
// 0, and returns how long p waits before more: until the rate has repaid
// the debt (0 when there is none).
func (m *meter) pace(p string, n int) time.Duration {
	if m == nil || m.rate <= 0 {
		return 0
	}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.bucketLocked(p, now)
	b.tokens -= float64(n)
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / m.rate * float64(time.Second))
}

// charge takes n units of p's bucket for work already admitted (take
// with n 0), even below 0.
func (m *meter) charge(p string, n int) {
	if m == nil || m.rate <= 0 {
		return
	}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bucketLocked(p, now).tokens -= float64(n)
}

// bucketLocked returns p's bucket refilled up to now. Past maxBuckets
// principals the newest share one bucket, as the request rate's do.
func (m *meter) bucketLocked(p string, now time.Time) *bucket {
	b, ok := m.buckets[p]
	if !ok {
		if len(m.buckets) >= maxBuckets {
			for q, b := range m.buckets { // a full bucket is the same as none
				if b.tokens+now.Sub(b.at).Seconds()*m.rate >= float64(m.burst) {
					delete(m.buckets, q)
				}
			}
		}
		if len(m.buckets) >= maxBuckets {
			p = sharedBucket
			b = m.buckets[p]
		}
		if b == nil {
			b = &bucket{tokens: float64(m.burst), at: now}
			m.buckets[p] = b
		}
	}
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(float64(m.burst), b.tokens+d.Seconds()*m.rate)
		b.at = now
	}
	return b
}

// meters are the cost meters of one node (Limits.ListRate, WatchOpenRate,
// WatchEventRate, RenewRate).
type meters struct {
	lists, watchOpens, watchEvents, renewals *meter
	connOpens                                *meter // per address, not per principal (connlimit.go)
}

// newMeters makes the meters of cfg. Their defaults (DefaultLimits):
//
//   - list-rate 10 000 entries/s, burst 20 000: a dashboard or CLI listing
//     1 000 locks a few times a second stays well inside; a principal
//     listing in a loop does not.
//   - watch-open-rate 100/s, burst 512: enough to open
//     watches-per-principal streams at once.
//   - watch-event-rate 5 000 events/s, burst 10 000: a watch of the whole
//     key space on a node granting and releasing 2 500 locks a second.
//     All the streams of a principal together are sent at most that on
//     average (one event costs the node a message on each stream it goes
//     to, so 500 watches of one principal would otherwise turn 300 writes
//     a second into 150 000 sends, taking the CPU from every other
//     client). A stream sent more waits, and one that falls half the event
//     history behind is ended with resource-exhausted (internal/hub), from
//     where it resumes: events still reach every watch, in order.
//   - conn-rate-per-address 200 connections/s, burst 2 048: per client
//     address (connlimit.go), not per principal. Twice conns-per-address
//     at once (every client of a host reconnecting after a restart), then
//     a reconnect every 5 ms; a dial-and-close loop is refused at accept,
//     before the connection costs an HTTP/2 server.
//   - renew-rate 60 000 ids/s, burst 60 000: sessions-per-principal
//     (10 000) sessions at the shortest TTL (1 s), renewed every TTL/3 as
//     the clients do, are 30 000 ids/s; twice that covers the twice the
//     limit a principal may hold for a while after a leader change. At a
//     10 s TTL 10 000 sessions need 3 000 ids/s.
func newMeters(cfg Limits, clk clock.Clock, count func(string)) meters {
	connOpens := newMeter("conn-rate-per-address", "connections/s", cfg.ConnRatePerAddress, cfg.ConnBurstPerAddress, clk, count)
	connOpens.who = "address"
	connOpens.count = func(string) {} // the listener counts its refusals itself
	return meters{
		lists:       newMeter("list-rate", "listed entries/s", cfg.ListRate, cfg.ListBurst, clk, count),
		watchOpens:  newMeter("watch-open-rate", "watch opens/s", cfg.WatchOpenRate, cfg.WatchOpenBurst, clk, count),
		watchEvents: newMeter("watch-event-rate", "watch events/s", cfg.WatchEventRate, cfg.WatchEventBurst, clk, count),
		renewals:    newMeter("renew-rate", "renewed lease ids/s", cfg.RenewRate, cfg.RenewBurst, clk, count),
		connOpens:   connOpens,
	}
}

// ListCharge admits a read of the caller in ctx that walks many entries
// (locks of a List or of a watch's compacted state, sessions of a
// ListSessions): refused when the caller's list-rate is spent. Call the
// returned func once with the entries it returned, at least one of which
// is charged.
func (l *Limiter) ListCharge(ctx context.Context) (func(used int), error) {
	p := Principal(ctx)
	if err := l.meters.lists.take(p, 0); err != nil {
		return nil, err
	}
	return func(used int) { l.meters.lists.charge(p, max(used, 1)) }, nil
}

// WatchOpen admits one more Watch of the caller in ctx: the open-stream
// gate (watches, watches-per-principal) first, then the rate of opens. The
// returned func closes the stream's place.
func (l *Limiter) WatchOpen(ctx context.Context) (func(), error) {
	release, err := l.stream(ctx, l.watches)
	if err != nil {
		return nil, err
	}
	if err := l.meters.watchOpens.take(Principal(ctx), 1); err != nil {
		release()
		return nil, api.ToConnect(err)
	}
	return release, nil
}

// WatchSent paces the Watch streams of the caller in ctx: it charges n
// events a stream just sent and returns how long that stream waits before
// it sends more (0: none).
func (l *Limiter) WatchSent(ctx context.Context, n int) time.Duration {
	return l.meters.watchEvents.pace(Principal(ctx), n)
}

// Renew admits a renewal of n lease ids by the caller in ctx.
func (l *Limiter) Renew(ctx context.Context, n int) error {
	if err := l.meters.renewals.take(Principal(ctx), n); err != nil {
		return err // not a nil *api.Error in an error
	}
	return nil
}

// validateMeters reports a meter with a rate but no burst.
func (l Limits) validateMeters() error {
	for _, m := range []struct {
		rate        float64
		burst       int
		name, bname string
	}{{l.ListRate, l.ListBurst, "list-rate", "list-burst"}, {l.WatchOpenRate, l.WatchOpenBurst, "watch-open-rate", "watch-open-burst"}, {l.WatchEventRate, l.WatchEventBurst, "watch-event-rate", "watch-event-burst"}, {l.RenewRate, l.RenewBurst, "renew-rate", "renew-burst"}, {l.ConnRatePerAddress, l.ConnBurstPerAddress, "conn-rate-per-address", "conn-burst-per-address"}} {
		if m.rate > 0 && m.burst < 1 {
			return fmt.Errorf("server: limit %s is set but %s is 0; a burst of at least 1 is needed", m.name, m.bname)
		}
	}
	return nil
}
