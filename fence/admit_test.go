package fence_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/boltfence"
)

func openBolt(t *testing.T, path string) *boltfence.Store {
	t.Helper()
	s, err := boltfence.Open(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestAdmitterSerializesPerKey: while an admission for a key is open, another admission for
// the same key waits (here: until its context ends), and other keys are not blocked.
func TestAdmitterSerializesPerKey(t *testing.T) {
	ctx := context.Background()
	a := fence.NewAdmitter(fence.NewMemoryTokenStore())
	held, err := a.Begin(ctx, "a", 1)
	if err != nil {
		t.Fatal(err)
	}

	waitCtx, cancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		ad, err := a.Begin(waitCtx, "a", 2)
		if ad != nil {
			ad.Release()
		}
		waited <- err
	}()

	other, err := a.Begin(ctx, "b", 1) // a different key does not wait
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	other.Release()

	select {
	case err := <-waited:
		t.Fatalf("second admission for a held key returned %v while the key was held", err)
	default:
	}
	cancel()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Fatalf("waiting admission = %v, want context.Canceled", err)
	}

	// Releasing without Commit records nothing; the key is free again.
	held.Release()
	held.Release() // idempotent
	if err := held.Commit(ctx); !errors.Is(err, fence.ErrAdmissionDone) {
		t.Fatalf("Commit after Release = %v, want ErrAdmissionDone", err)
	}
	if tok, _ := a.LastToken(ctx, "a"); tok != 0 {
		t.Fatalf("LastToken after release without commit = %d, want 0", tok)
	}
	ad, err := a.Begin(ctx, "a", 2)
	if err != nil {
		t.Fatal(err)
	}
	if ad.LastToken() != 0 || ad.Token() != 2 || ad.Key() != "a" {
		t.Fatalf("admission = %s/%d last %d", ad.Key(), ad.Token(), ad.LastToken())
	}
	ad.Release()
}

// TestAdmitterHandsOver: a waiter gets the key once the holder releases, and is judged
// against the token the holder recorded.
func TestAdmitterHandsOver(t *testing.T) {
	ctx := context.Background()
	a := fence.NewAdmitter(fence.NewMemoryTokenStore(), fence.WithMode(fence.Strict))
	held, err := a.Begin(ctx, "k", 5)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, tok := range []uint64{5, 6} {
		wg.Go(func() {
			errs <- a.Admit(ctx, "k", tok, func(context.Context) error { return nil })
		})
	}
	if err := held.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	held.Release()
	wg.Wait()
	close(errs)
	var stale, ok int
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, fence.ErrStaleToken):
			stale++
		default:
			t.Fatal(err)
		}
	}
	// 5 is always stale (strict, 5 recorded); 6 is accepted.
	if ok != 1 || stale != 1 {
		t.Fatalf("ok=%d stale=%d, want 1 and 1", ok, stale)
	}
	if tok, _ := a.LastToken(ctx, "k"); tok != 6 {
		t.Fatalf("LastToken = %d, want 6", tok)
	}
}

// failingStore fails SetToken while failing is set.
type failingStore struct {
	*fence.MemoryTokenStore
	mu      sync.Mutex
	failing bool
}

func (s *failingStore) SetToken(ctx context.Context, key string, token uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing {
		return errors.New("disk full")
	}
	return s.MemoryTokenStore.SetToken(ctx, key, token)
}

// TestAdmitterCommitFailure: when the store cannot record a token, Commit fails, and the
// Admitter still refuses older tokens in this process.
func TestAdmitterCommitFailure(t *testing.T) {
	ctx := context.Background()
	store := &failingStore{MemoryTokenStore: fence.NewMemoryTokenStore(), failing: true}
	a := fence.NewAdmitter(store)
	err := a.Admit(ctx, "k", 9, func(context.Context) error { return nil })
	if err == nil || err.Error() != `fence: record token 9 for "k": disk full` {
		t.Fatalf("Admit with failing store = %v", err)
	}
	mustStale(t, a.Admit(ctx, "k", 8, func(context.Context) error { return nil }), "k", 8, 9)
	if tok, _ := a.LastToken(ctx, "k"); tok != 9 {
		t.Fatalf("LastToken = %d, want 9 (remembered in memory)", tok)
	}
	store.mu.Lock()
	store.failing = false
	store.mu.Unlock()
	if err := a.Admit(ctx, "k", 10, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if tok, _ := store.LastToken(ctx, "k"); tok != 10 {
		t.Fatalf("store token = %d, want 10", tok)
	}
}

// TestBoltTokenStoreRestart: tokens survive close and reopen; the store never lowers a token.
func TestBoltTokenStoreRestart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tokens.db")
	s := openBolt(t, path)
	if s.Path() != path {
		t.Fatalf("Path = %q", s.Path())
	}
	for _, tok := range []uint64{3, 18446744073709551615, 7} {
		if err := s.SetToken(ctx, "k", tok); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if _, err := s.LastToken(ctx, "k"); !errors.Is(err, fence.ErrClosed) {
		t.Fatalf("LastToken after Close = %v, want ErrClosed", err)
	}

	s2 := openBolt(t, path)
	if tok, err := s2.LastToken(ctx, "k"); err != nil || tok != 18446744073709551615 {
		t.Fatalf("after reopen LastToken = %d, %v", tok, err)
	}
	if tok, err := s2.LastToken(ctx, "missing"); err != nil || tok != 0 {
		t.Fatalf("missing key = %d, %v", tok, err)
	}
	// A second opener is locked out instead of sharing the file.
	if _, err := boltfence.Open(path, 50*time.Millisecond); err == nil {
		t.Fatal("second open of a locked token store succeeded")
	}
}
