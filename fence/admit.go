package fence

import (
	"context"
	"fmt"
	"sync"
)

// TokenStore records the last accepted token per key for an Admitter. It stores tokens only,
// never the effects: the effect happens elsewhere (an HTTP upstream, a handler).
//
// The Admitter calls it for a key only while holding that key's lock, so an implementation
// needs no per-key atomicity of its own; it must be safe for concurrent calls on different keys.
type TokenStore interface {
	// LastToken returns the last recorded token for key, 0 when none.
	LastToken(ctx context.Context, key string) (uint64, error)
	// SetToken records token as key's last token. It must be durable to the store's own
	// standard when it returns nil (boltfence.Store: fsync'd). It must never lower a
	// recorded token: a lower token is ignored.
	SetToken(ctx context.Context, key string, token uint64) error
}

// KeyLimiter is an optional interface of a TokenStore with a bound on its keys
// (boltfence.Store). When Full reports true, an Admitter refuses an admission for a key the
// store does not know yet with ErrTooManyKeys before the effect runs.
type KeyLimiter interface {
	Full() bool
}

// Admitter admits effects that the resource cannot make atomic with a token check itself.
// For each key it serializes admissions in this process: Begin takes the key's lock and checks
// the token against the TokenStore, the caller runs its effect, Commit records the token, and
// Release frees the key. Because the lock is held from check to record, no other admission for
// the key can run in between, so check, effect and record are one step — as long as every
// effect on the resource goes through this Admitter (see the package comment).
//
// An Admitter is safe for concurrent use. It does not own its TokenStore.
type Admitter struct {
	store TokenStore
	mode  Mode
	locks keyLocks

	mu      sync.Mutex        // protects unsaved
	unsaved map[string]uint64 // tokens whose effect ran but whose SetToken failed
}

// NewAdmitter returns an Admitter over store. Only WithMode applies.
func NewAdmitter(store TokenStore, opts ...Option) *Admitter {
	return &Admitter{
		store:   store,
		mode:    Apply(opts...).Mode,
		locks:   keyLocks{m: make(map[string]*keyLock)},
		unsaved: make(map[string]uint64),
	}
}

// Mode returns the Admitter's acceptance rule.
func (a *Admitter) Mode() Mode { return a.mode }

// Admission is a granted, not yet recorded admission of one token for one key; it holds the
// key's lock until Release. It is used by one goroutine at a time.
type Admission struct {
	a        *Admitter
	key      string
	token    uint64
	last     uint64
	unlock   func()
	released bool
	recorded bool
}

// Begin waits for key's lock (bounded by ctx), then checks token against the key's last
// token. On success the returned Admission holds the lock: the caller runs its effect, calls
// Commit iff the effect succeeded, and always calls Release. When the token is stale Begin
// returns a *StaleTokenError (matching ErrStaleToken) and holds nothing; when key is new and
// the store is full (KeyLimiter), an error wrapping ErrTooManyKeys. ctx errors are returned
// as is.
func (a *Admitter) Begin(ctx context.Context, key string, token uint64) (*Admission, error) {
	if err := ValidateWrite(key, token); err != nil {
		return nil, err
	}
	unlock, err := a.locks.lock(ctx, key)
	if err != nil {
		return nil, err
	}
	last, err := a.lastTokenLocked(ctx, key)
	if err != nil {
		unlock()
		return nil, err
	}
	if !a.mode.Admits(token, last) {
		unlock()
		return nil, &StaleTokenError{Key: key, Token: token, LastToken: last}
	}
	if kl, ok := a.store.(KeyLimiter); ok && last == 0 && kl.Full() {
		unlock()
		return nil, fmt.Errorf("%w: no room for new key %q", ErrTooManyKeys, key)
	}
	return &Admission{a: a, key: key, token: token, last: last, unlock: unlock}, nil
}

// lastTokenLocked returns the key's last token; the caller holds the key's lock.
func (a *Admitter) lastTokenLocked(ctx context.Context, key string) (uint64, error) {
	last, err := a.store.LastToken(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("fence: read last token of %q: %w", key, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return max(last, a.unsaved[key]), nil
}

// Admit runs effect iff token is not stale for key, serialized with every other admission for
// key, and records token iff effect returns nil. The error of effect is returned as is.
func (a *Admitter) Admit(ctx context.Context, key string, token uint64, effect func(context.Context) error) error {
	ad, err := a.Begin(ctx, key, token)
	if err != nil {
		return err
	}
	defer ad.Release()
	if err := effect(ctx); err != nil {
		return err
	}
	return ad.Commit(ctx)
}

// LastToken returns the last recorded token for key without waiting for the key's lock.
func (a *Admitter) LastToken(ctx context.Context, key string) (uint64, error) {
	if err := ValidateKey(key); err != nil {
		return 0, err
	}
	return a.lastTokenLocked(ctx, key)
}

// Key returns the admitted key.
func (ad *Admission) Key() string { return ad.key }

// Token returns the admitted token.
func (ad *Admission) Token() uint64 { return ad.token }

// LastToken returns the key's last token when the admission was granted.
func (ad *Admission) LastToken() uint64 { return ad.last }

// Commit records the admitted token as the key's last token; call it once the effect
// succeeded, before telling anyone that it did. Calling it again is a no-op. If the store fails,
// the Admitter still remembers the token in memory (stale tokens stay refused in this process)
// and Commit returns the error: the effect happened but a restart could forget its token.
func (ad *Admission) Commit(ctx context.Context) error {
	if ad.released {
		return ErrAdmissionDone
	}
	if ad.recorded {
		return nil
	}
	a := ad.a
	err := a.store.SetToken(ctx, ad.key, ad.token)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.unsaved[ad.key] = max(a.unsaved[ad.key], ad.token)
		return fmt.Errorf("fence: record token %d for %q: %w", ad.token, ad.key, err)
	}
	if a.unsaved[ad.key] <= ad.token {
		delete(a.unsaved, ad.key)
	}
	ad.recorded = true
	return nil
}

// Release frees the key's lock. It is idempotent. Without a Commit, the token is not recorded.
func (ad *Admission) Release() {
	if !ad.released {
		ad.released = true
		ad.unlock()
	}
}

// keyLocks is a set of per-key mutexes whose waits honour a context.
type keyLocks struct {
	mu sync.Mutex          // protects m and every keyLock.refs
	m  map[string]*keyLock // entries exist while someone holds or waits for the key
}

type keyLock struct {
	sem  chan struct{} // capacity 1: full while held
	refs int           // holders + waiters
}

func (l *keyLocks) lock(ctx context.Context, key string) (unlock func(), err error) {
	l.mu.Lock()
	e := l.m[key]
	if e == nil {
		e = &keyLock{sem: make(chan struct{}, 1)}
		l.m[key] = e
	}
	e.refs++
	l.mu.Unlock()

	select {
	case e.sem <- struct{}{}:
		return func() {
			<-e.sem
			l.unref(key, e)
		}, nil
	case <-ctx.Done():
		l.unref(key, e)
		return nil, ctx.Err()
	}
}

func (l *keyLocks) unref(key string, e *keyLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.refs--
	if e.refs == 0 {
		delete(l.m, key)
	}
}

// MemoryTokenStore is a TokenStore in memory, for tests and for processes whose restart may
// forget tokens (it is NOT durable: after a restart every token is admitted again).
type MemoryTokenStore struct {
	mu     sync.Mutex // protects tokens
	tokens map[string]uint64
}

// NewMemoryTokenStore returns an empty MemoryTokenStore.
func NewMemoryTokenStore() *MemoryTokenStore {
	return &MemoryTokenStore{tokens: make(map[string]uint64)}
}

// LastToken implements TokenStore.
func (s *MemoryTokenStore) LastToken(_ context.Context, key string) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokens[key], nil
}

// SetToken implements TokenStore.
func (s *MemoryTokenStore) SetToken(_ context.Context, key string, token uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[key] = max(s.tokens[key], token)
	return nil
}
