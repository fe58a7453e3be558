package server_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	lh "github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// canary is a well-behaved client: it holds one lock for the whole test
// (its Done must never fire) and acquires and releases another in a loop,
// recording each round trip.
type canary struct {
	t    *testing.T
	c    *lh.Client
	s    *lh.Session
	held *lh.Lock
	// pace, when set, is the least time between the starts of two rounds,
	// so that the canary stays within a low rate limit of its own.
	pace time.Duration

	mu   sync.Mutex // protects following
	lats []time.Duration
}

func startCanary(t *testing.T, c *servertest.Cluster) *canary {
	t.Helper()
	cl, err := lh.Dial(ctxT(t), c.Addr)
	mustOK(t, "Dial", err)
	t.Cleanup(func() { _ = cl.Close() })
	s, err := cl.NewSession(ctxT(t), lh.WithTTL(10*time.Second), lh.WithOwner("canary"))
	mustOK(t, "canary session", err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	held, err := s.Acquire(ctxT(t), "canary:held")
	mustOK(t, "canary acquire", err)
	return &canary{t: t, c: cl, s: s, held: held}
}

// round acquires and releases canary:loop once and records how long it took.
func (k *canary) round(ctx context.Context) error {
	start := time.Now()
	l, err := k.s.Acquire(ctx, "canary:loop")
	if err != nil {
		return err
	}
	if err := l.Release(ctx); err != nil {
		return err
	}
	took := time.Since(start)
	k.mu.Lock()
	k.lats = append(k.lats, took)
	k.mu.Unlock()
	time.Sleep(k.pace - took) // a well-behaved client's pace; no-op when unset
	return nil
}

// p99 runs n rounds and returns their 99th percentile.
func (k *canary) p99(n int) time.Duration {
	k.t.Helper()
	k.mu.Lock()
	k.lats = nil
	k.mu.Unlock()
	for range n {
		mustOK(k.t, "canary round", k.round(ctxT(k.t)))
	}
	return k.percentile()
}

func (k *canary) percentile() time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.lats) == 0 {
		return 0
	}
	s := slices.Clone(k.lats)
	slices.Sort(s)
	return s[(len(s)*99+99)/100-1]
}

// during runs flood and measures the canary's p99 while it does: over at
// least 100 rounds, and until flood calls ready (it is at full strength)
// or 45 s have passed (on an idle machine each flood is at full strength
// within a few seconds). flood must return once ctx ends. Then it checks
// that the canary kept its session and lock and that its p99 stayed
// within 20 times idle (or under an absolute 2 s: the machine running the
// tests may be loaded by other work).
func (k *canary) during(name string, idle time.Duration, flood func(ctx context.Context, ready func())) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(k.t.Context(), time.Minute)
	defer cancel()
	full := make(chan struct{})
	var once sync.Once
	done := make(chan struct{})
	go func() { defer close(done); flood(ctx, func() { once.Do(func() { close(full) }) }) }()
	k.mu.Lock()
	k.lats = nil
	k.mu.Unlock()
	limit := time.Now().Add(45 * time.Second)
rounds:
	for n := 1; ; n++ {
		mustOK(k.t, name+": canary round", k.round(ctxT(k.t)))
		if n < 100 {
			continue
		}
		select {
		case <-full:
			break rounds
		default:
		}
		if time.Now().After(limit) {
			k.t.Errorf("%s: the flood was not at full strength after 45 s", name)
			break
		}
	}
	busy := k.percentile()
	cancel()
	<-done
	k.check(name, idle, busy)
}

func (k *canary) check(name string, idle, busy time.Duration) {
	k.t.Helper()
	select {
	case <-k.held.Done():
		k.t.Fatalf("%s: the canary lost its lock: %v", name, context.Cause(k.held.Context()))
	case <-k.s.Done():
		k.t.Fatalf("%s: the canary lost its session: %v", name, k.s.Err())
	default:
	}
	factor := float64(busy) / float64(max(idle, time.Microsecond))
	k.t.Logf("%s: canary acquire+release p99 idle %v, under flood %v (factor %.1f)", name, idle, busy, factor)
	if factor > 20 && busy > 2*time.Second {
		k.t.Fatalf("%s: canary p99 %v under flood is %.1f times its idle p99 %v", name, busy, factor, idle)
	}
}

// bearer adds an Authorization header, so that a test client is a
// principal of its own.
type bearer struct {
	rt    http.RoundTripper
	token string
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

func h2c() *http.Transport {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Transport{Protocols: &p, DialContext: dialFrom} // dialFrom: see as
}

func principalName(i int) string { return fmt.Sprintf("flooder-%d", i) }
