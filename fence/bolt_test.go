package fence_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/boltfence"
)

// TestBoltTokenStoreMaxKeys: beyond MaxKeys a new key is refused with ErrTooManyKeys —
// by the store, by an Admitter before any effect, and by the middleware with 507
// resource-exhausted — while known keys keep working; the count survives a reopen.
func TestBoltTokenStoreMaxKeys(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tokens.db")
	s := openBolt(t, path)
	if s.MaxKeys() != boltfence.DefaultMaxKeys {
		t.Fatalf("default MaxKeys = %d, want %d", s.MaxKeys(), boltfence.DefaultMaxKeys)
	}
	s.SetMaxKeys(2)
	for _, k := range []string{"a", "b"} {
		if err := s.SetToken(ctx, k, 5); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetToken(ctx, "c", 5); !errors.Is(err, fence.ErrTooManyKeys) {
		t.Fatalf("third key: %v, want ErrTooManyKeys", err)
	}
	if tok, _ := s.LastToken(ctx, "c"); tok != 0 {
		t.Fatalf("refused key recorded token %d", tok)
	}
	if err := s.SetToken(ctx, "a", 6); err != nil {
		t.Fatalf("known key when full: %v", err)
	}
	if s.Len() != 2 || !s.Full() {
		t.Fatalf("Len %d Full %v, want 2 true", s.Len(), s.Full())
	}

	a := fence.NewAdmitter(s)
	ran := false
	err := a.Admit(ctx, "c", 9, func(context.Context) error { ran = true; return nil })
	if !errors.Is(err, fence.ErrTooManyKeys) || ran {
		t.Fatalf("Admit of a new key when full: %v (effect ran: %v)", err, ran)
	}
	inner := &recordingHandler{}
	h := fence.Middleware(a)(inner)
	w := req{headers: hdr("Fencing-Key", "c", "Fencing-Token", "9")}.do(h)
	if e := decodeError(t, w); w.Code != http.StatusInsufficientStorage || e.Code != fence.CodeResourceExhausted || inner.calls.Load() != 0 {
		t.Fatalf("middleware, new key when full: %d %+v, handler calls %d", w.Code, e, inner.calls.Load())
	}
	if w := (req{headers: hdr("Fencing-Key", "b", "Fencing-Token", "9")}).do(h); w.Code != 200 {
		t.Fatalf("middleware, known key when full: %d %s", w.Code, w.Body)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openBolt(t, path)
	if s2.Len() != 2 {
		t.Fatalf("Len after reopen = %d, want 2", s2.Len())
	}
}

// TestBoltTokenStoreDropIdle: DropIdle removes exactly the keys last recorded before the
// cut, which frees room for new keys; a key rewritten with its same token counts as fresh.
func TestBoltTokenStoreDropIdle(t *testing.T) {
	ctx := context.Background()
	s := openBolt(t, filepath.Join(t.TempDir(), "tokens.db"))
	s.SetMaxKeys(3)
	for _, k := range []string{"old-1", "old-2", "kept"} {
		if err := s.SetToken(ctx, k, 4); err != nil {
			t.Fatal(err)
		}
	}
	cut := time.Now()
	waitFor(t, "the wall clock to pass the cut", func() bool { return time.Now().UnixNano() > cut.UnixNano() })
	if err := s.SetToken(ctx, "kept", 4); err != nil { // same token: refreshes the key
		t.Fatal(err)
	}
	n, err := s.DropIdle(ctx, cut)
	if err != nil || n != 2 {
		t.Fatalf("DropIdle = %d, %v; want 2", n, err)
	}
	for k, want := range map[string]uint64{"old-1": 0, "old-2": 0, "kept": 4} {
		if tok, _ := s.LastToken(ctx, k); tok != want {
			t.Errorf("%s: token %d, want %d", k, tok, want)
		}
	}
	if s.Len() != 1 || s.Full() {
		t.Fatalf("Len %d Full %v after DropIdle", s.Len(), s.Full())
	}
	if err := s.SetToken(ctx, "new", 1); err != nil {
		t.Fatalf("new key after DropIdle: %v", err)
	}
}

// TestBoltTokenStoreOldRecords: a file written by an older version (8-byte records, no time)
// opens with its tokens and key count, and its keys count as written at open time.
func TestBoltTokenStoreOldRecords(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tokens.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("leasehold.fence.tokens.v1"))
		if err != nil {
			return err
		}
		return b.Put([]byte("k"), binary.BigEndian.AppendUint64(nil, 17))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	s := openBolt(t, path)
	if tok, err := s.LastToken(ctx, "k"); err != nil || tok != 17 || s.Len() != 1 {
		t.Fatalf("old record: token %d, %v, Len %d", tok, err, s.Len())
	}
	if n, err := s.DropIdle(ctx, before); err != nil || n != 0 {
		t.Fatalf("DropIdle before open = %d, %v; want 0", n, err)
	}
}

// waitFor polls cond every millisecond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-time.After(time.Millisecond)
	}
}
