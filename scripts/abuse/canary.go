package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	lh "github.com/leasehold/leasehold/client"
)

// Names the canary uses; no flood touches them.
const (
	canaryHeld = "abuse:canary:held"
	canaryLoop = "abuse:canary:loop"
	canaryKeys = 256 // the fenced writes cycle over this many keys
)

// opTimeout bounds each canary round and each fresh client: a round that
// hangs counts as this long.
const opTimeout = 5 * time.Second

// sample is one canary round: acquire, fenced write, release.
type sample struct {
	phase string // the phase at the round's start
	took  time.Duration
	err   error
}

// canary is a well-behaved client from 127.0.0.1: a session (TTL 10 s, the
// client's keepalive) holding one lock for the whole run, looping acquire →
// fenced KV write → release on another name. It remembers every write
// that was acknowledged, to read them all back at the end.
type canary struct {
	addr string
	// c, s and held are replaced (restart) only while run is stopped.
	c    *lh.Client
	s    *lh.Session
	held *lh.Lock

	phase atomic.Pointer[string] // the phase rounds are tagged with

	mu      sync.Mutex // protects following
	samples []sample
	acked   map[string]string // key → last acknowledged value
	// maybe holds, per key, the values of writes after the last
	// acknowledged one that failed: a write whose answer was lost
	// (outcome-unknown) may have applied.
	maybe  map[string][]string
	writes int
}

func startCanary(ctx context.Context, addr string) (*canary, error) {
	k := &canary{addr: addr, acked: map[string]string{}, maybe: map[string][]string{}}
	k.setPhase("")
	if err := k.start(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

// start gives the canary a new client, session and held lock.
func (k *canary) start(ctx context.Context) error {
	c, err := lh.Dial(ctx, k.addr)
	if err != nil {
		return err
	}
	s, err := c.NewSession(ctx, lh.WithTTL(10*time.Second), lh.WithOwner("abuse-canary"))
	if err != nil {
		_ = c.Close()
		return fmt.Errorf("canary session: %w", err)
	}
	held, err := s.Acquire(ctx, canaryHeld) // queues behind a lost session of its own until that expires
	if err != nil {
		_ = c.Close()
		return fmt.Errorf("canary acquire %s: %w", canaryHeld, err)
	}
	k.c, k.s, k.held = c, s, held
	return nil
}

// restart replaces a canary that lost its session or lock (the run is
// stopped), so that the next floods are measured too; what it lost stays
// reported.
func (k *canary) restart(ctx context.Context) error {
	k.close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return k.start(ctx)
}

func (k *canary) setPhase(p string) { k.phase.Store(&p) }

// run loops rounds until ctx ends.
func (k *canary) run(ctx context.Context) {
	for n := 0; ctx.Err() == nil; n++ {
		phase := *k.phase.Load()
		start := time.Now()
		err := k.round(ctx, n)
		took := time.Since(start)
		if ctx.Err() != nil {
			return
		}
		k.mu.Lock()
		k.samples = append(k.samples, sample{phase: phase, took: took, err: err})
		k.mu.Unlock()
		if err != nil {
			time.Sleep(10 * time.Millisecond) // do not spin on a refusal
		}
	}
}

func (k *canary) round(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	l, err := k.s.Acquire(ctx, canaryLoop)
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	key := fmt.Sprintf("abuse:canary:kv:%d", n%canaryKeys)
	val := fmt.Sprintf("write-%d-token-%d", n, l.Token())
	if err := k.c.KVPut(ctx, key, []byte(val), l.Token(), false); err != nil {
		k.mu.Lock()
		k.maybe[key] = append(k.maybe[key], val)
		k.mu.Unlock()
		_ = l.Release(ctx)
		return fmt.Errorf("kv put: %w", err)
	}
	k.mu.Lock()
	k.acked[key] = val
	delete(k.maybe, key)
	k.writes++
	k.mu.Unlock()
	if err := l.Release(ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// stats returns the p90 of the rounds started in phase, their count, how
// many failed and the first error among them. A round that failed counts
// as opTimeout, however soon it failed: it did not get its work done.
func (k *canary) stats(phase string) (time.Duration, int, int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var lats []time.Duration
	var first error
	failed := 0
	for _, s := range k.samples {
		if s.phase != phase {
			continue
		}
		if s.err != nil {
			failed++
			if first == nil {
				first = s.err
			}
			lats = append(lats, opTimeout)
			continue
		}
		lats = append(lats, s.took)
	}
	return p90(lats), len(lats), failed, first
}

// holding says what the canary lost of its held lock: "" when its session
// and lock are alive and the grantor still names it the holder, with the
// same token.
func (k *canary) holding(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	select {
	case <-k.held.Done():
		return fmt.Sprintf("its lock %s (%v; %s)", canaryHeld, context.Cause(k.held.Context()), k.grantorSays(ctx))
	case <-k.s.Done():
		return fmt.Sprintf("its session (%v; %s)", k.s.Err(), k.grantorSays(ctx))
	default:
	}
	info, err := k.c.Status(ctx, canaryHeld)
	if err != nil {
		return fmt.Sprintf("sight of its lock %s: status: %v", canaryHeld, err)
	}
	h := info.GetHolder()
	if h.GetLeaseId() != k.s.ID() || h.GetToken() != k.held.Token() {
		return fmt.Sprintf("its lock %s: held by lease %q token %d, it was told token %d",
			canaryHeld, h.GetLeaseId(), h.GetToken(), k.held.Token())
	}
	return ""
}

// grantorSays tells whether the grantor still names the canary the holder
// of its lock, once the client gave it up.
func (k *canary) grantorSays(ctx context.Context) string {
	info, err := k.c.Status(ctx, canaryHeld)
	switch h := info.GetHolder(); {
	case err != nil:
		return "status: " + err.Error()
	case h.GetLeaseId() == k.s.ID() && h.GetToken() == k.held.Token():
		return "the grantor still names it the holder"
	case h == nil:
		return "the grantor freed it"
	default:
		return fmt.Sprintf("the grantor names lease %s token %d the holder", h.GetLeaseId(), h.GetToken())
	}
}

// verify reads back every acknowledged write and checks the held lock; it
// returns what was lost.
func (k *canary) verify(ctx context.Context) (int, []string) {
	var lost []string
	if l := k.holding(ctx); l != "" {
		lost = append(lost, l)
	}
	k.mu.Lock()
	acked := maps.Clone(k.acked)
	maybe := maps.Clone(k.maybe)
	writes := k.writes
	k.mu.Unlock()
	for key, want := range acked {
		cctx, cancel := context.WithTimeout(ctx, opTimeout)
		got, _, err := k.c.KVGet(cctx, key)
		cancel()
		switch {
		case err != nil:
			lost = append(lost, fmt.Sprintf("kv get %s: %v", key, err))
		case !keptWrite(string(got), want, maybe[key]):
			lost = append(lost, fmt.Sprintf("kv %s is %q, the last acknowledged write was %q", key, got, want))
		}
	}
	return writes, lost
}

// keptWrite says whether got, a key's value read back, keeps its last
// acknowledged write acked: it is that value, or that of a later write
// whose outcome the canary does not know.
func keptWrite(got, acked string, maybe []string) bool {
	return got == acked || slices.Contains(maybe, got)
}

func (k *canary) close() {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	_ = k.held.Release(ctx)
	_ = k.s.Close(ctx)
	_ = k.c.Close()
}

// freshClients tries a new client from 127.0.0.1 (its own connection)
// creating a session every interval until ctx ends, and counts those that
// got one within opTimeout; first is the first failure's error.
func freshClients(ctx context.Context, addr string, interval time.Duration) (ok, tried int64, first error) {
	var wg sync.WaitGroup
	var nOK, nTried atomic.Int64
	var firstErr atomic.Pointer[error]
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			if p := firstErr.Load(); p != nil {
				first = *p
			}
			return nOK.Load(), nTried.Load(), first
		case <-t.C:
		}
		nTried.Add(1)
		wg.Go(func() {
			if err := freshClient(addr); err != nil {
				firstErr.CompareAndSwap(nil, &err)
				return
			}
			nOK.Add(1)
		})
	}
}

func freshClient(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	c, err := lh.Dial(ctx, addr, lh.WithRetryTimeout(opTimeout))
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	s, err := c.NewSession(ctx, lh.WithTTL(10*time.Second), lh.WithOwner("abuse-fresh"))
	if err != nil {
		return err
	}
	_ = s.Close(ctx) // it got in; closing is not what is measured
	return nil
}
