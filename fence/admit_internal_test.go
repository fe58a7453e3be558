package fence

import (
	"context"
	"sync"
	"testing"
)

// TestKeyLocksForget: per-key lock entries disappear once nobody holds or waits for the key,
// so the map does not grow with every key ever seen.
func TestKeyLocksForget(t *testing.T) {
	l := keyLocks{m: make(map[string]*keyLock)}
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			key := string(rune('a' + i%4))
			unlock, err := l.lock(ctx, key)
			if err != nil {
				t.Error(err)
				return
			}
			unlock()
		})
	}
	wg.Wait()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	unlock, err := l.lock(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.lock(cancelled, "held"); err == nil {
		t.Fatal("lock with a cancelled context on a held key succeeded")
	}
	unlock()
	if n := len(l.m); n != 0 {
		t.Fatalf("%d lock entries left, want 0", n)
	}
}
