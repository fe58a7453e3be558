package fence_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/sequencer"
)

// cluster is a grantor's signing side and the resource's pinned verifier.
type cluster struct {
	signer   *sequencer.Signer
	verifier *sequencer.Verifier
}

func newCluster(t *testing.T, id string, seed byte) cluster {
	t.Helper()
	k, err := sequencer.GenerateKey(bytes.NewReader(bytes.Repeat([]byte{seed}, 32)), "k1", time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	s, err := sequencer.NewSigner(id, k)
	if err != nil {
		t.Fatal(err)
	}
	v, err := sequencer.NewVerifier(s.KeySet())
	if err != nil {
		t.Fatal(err)
	}
	return cluster{signer: s, verifier: v}
}

func (c cluster) seq(t *testing.T, lock string, token uint64) string {
	t.Helper()
	s, err := c.signer.SignString(sequencer.Sequencer{Name: lock, Token: token, LeaseID: "lease-1", IssuedUnixMs: 1})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const huge = 1<<64 - 1

// TestPlainTokenCanBeBricked is the attack verifying mode exists for: one request with a huge
// bare token fences every honest holder out of the key for good.
func TestPlainTokenCanBeBricked(t *testing.T) {
	ctx := context.Background()
	g := fence.NewMemory()
	if err := g.Write(ctx, "acct:1", huge, []byte("forged")); err != nil {
		t.Fatal(err)
	}
	if err := g.Write(ctx, "acct:1", 5, []byte("honest")); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("honest write after a forged huge token: %v, want stale-token", err)
	}
}

func TestSequencedGuard(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, "c1", 1)
	other := newCluster(t, "c2", 1)  // same key bytes, another cluster id
	forger := newCluster(t, "c1", 2) // knows the cluster and key id, not the key
	locks := fence.LockMap(map[string]string{"acct:1": "lock:acct:1", "acct:2": "lock:acct:2"}, nil)
	g := fence.NewMemory()
	sg := fence.NewSequencers(c.verifier, locks).Guard(g)

	forged := forger.seq(t, "lock:acct:1", huge)
	altered := []byte(c.seq(t, "lock:acct:1", 7))
	altered[len(altered)/2] ^= 'A' ^ 'B' // keep it base64url, change a byte
	for _, tc := range []struct {
		name, key, seq string
		want           error
	}{
		{"forged", "acct:1", forged, sequencer.ErrBadSignature},
		{"altered", "acct:1", string(altered), nil}, // any refusal: see below
		{"another lock", "acct:1", c.seq(t, "lock:acct:2", huge), sequencer.ErrWrongLock},
		{"another cluster", "acct:1", other.seq(t, "lock:acct:1", huge), sequencer.ErrWrongCluster},
		{"malformed", "acct:1", "not-a-sequencer", sequencer.ErrMalformed},
		{"no lock for key", "acct:9", c.seq(t, "acct:9", huge), fence.ErrNoLock},
		{"bad key", "", c.seq(t, "lock:acct:1", huge), fence.ErrInvalidKey},
	} {
		err := sg.Write(ctx, tc.key, tc.seq, []byte(tc.name))
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: Write = %v, want %v", tc.name, err, tc.want)
		}
		if last, _, _ := sg.Last(ctx, "acct:1"); last != 0 {
			t.Fatalf("%s: a refused sequencer moved the last token to %d", tc.name, last)
		}
	}
	// The honest holder is not bricked: its real token is accepted, a stale one is refused.
	if err := sg.Write(ctx, "acct:1", c.seq(t, "lock:acct:1", 5), []byte("v5")); err != nil {
		t.Fatalf("honest write: %v", err)
	}
	var stale *fence.StaleTokenError
	if err := sg.Write(ctx, "acct:1", c.seq(t, "lock:acct:1", 4), []byte("v4")); !errors.As(err, &stale) || stale.LastToken != 5 {
		t.Fatalf("stale sequencer: %v, want stale-token with last 5", err)
	}
	if last, v, _ := g.Last(ctx, "acct:1"); last != 5 || string(v) != "v5" {
		t.Fatalf("last = %d %q, want 5 v5", last, v)
	}
}

func TestSequencersAdmit(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, "c1", 1)
	s := fence.NewSequencers(c.verifier, nil) // the lock is the key
	a := fence.NewAdmitter(fence.NewMemoryTokenStore())
	ran := 0
	effect := func(context.Context) error { ran++; return nil }
	if err := s.Admit(ctx, a, "k", newCluster(t, "c1", 3).seq(t, "k", huge), effect); !errors.Is(err, sequencer.ErrBadSignature) {
		t.Fatalf("forged: %v", err)
	}
	if err := s.Admit(ctx, a, "k", c.seq(t, "k", 3), effect); err != nil {
		t.Fatal(err)
	}
	if last, _ := a.LastToken(ctx, "k"); last != 3 || ran != 1 {
		t.Fatalf("last %d, effect ran %d times; want 3 and 1", last, ran)
	}
}

func TestMiddlewareSequencers(t *testing.T) {
	c := newCluster(t, "c1", 1)
	forger := newCluster(t, "c1", 2)
	a := fence.NewAdmitter(fence.NewMemoryTokenStore())
	var seen []string // the token header next saw
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Header.Get(fence.DefaultTokenHeader))
	})
	h := fence.Middleware(a, fence.WithSequencers(fence.NewSequencers(c.verifier, nil)))(next)
	const seqH = fence.DefaultSequencerHeader
	for _, tc := range []struct {
		name    string
		headers map[string][]string
		status  int
		code    string
	}{
		{"forged huge", hdr("Fencing-Key", "k", seqH, forger.seq(t, "k", huge)), http.StatusForbidden, fence.CodePermissionDenied},
		{"another lock", hdr("Fencing-Key", "k", seqH, c.seq(t, "other", huge)), http.StatusForbidden, fence.CodePermissionDenied},
		{"bare token only", hdr("Fencing-Key", "k", "Fencing-Token", "18446744073709551615"), http.StatusBadRequest, fence.CodeInvalidArgument},
		{"two sequencers", hdr("Fencing-Key", "k", seqH, c.seq(t, "k", 1), seqH, c.seq(t, "k", 1)), http.StatusBadRequest, fence.CodeInvalidArgument},
		{"malformed", hdr("Fencing-Key", "k", seqH, "@@"), http.StatusBadRequest, fence.CodeInvalidArgument},
		{"token disagrees", hdr("Fencing-Key", "k", seqH, c.seq(t, "k", 2), "Fencing-Token", "999"), http.StatusBadRequest, fence.CodeInvalidArgument},
	} {
		w := req{headers: tc.headers}.do(h)
		if w.Code != tc.status || decodeError(t, w).Code != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, w.Code, w.Body.String(), tc.status, tc.code)
		}
	}
	if len(seen) != 0 {
		t.Fatalf("refused requests reached the handler: %v", seen)
	}
	if last, _ := a.LastToken(context.Background(), "k"); last != 0 {
		t.Fatalf("refused requests recorded token %d", last)
	}
	// The honest holder: accepted, its token recorded; an older one is stale.
	if w := (req{headers: hdr("Fencing-Key", "k", seqH, c.seq(t, "k", 7), "Fencing-Token", "7")}).do(h); w.Code != http.StatusOK {
		t.Fatalf("honest request: %d %s", w.Code, w.Body.String())
	}
	if w := (req{headers: hdr("Fencing-Key", "k", seqH, c.seq(t, "k", 6))}).do(h); w.Code != http.StatusConflict {
		t.Fatalf("stale sequencer: %d %s", w.Code, w.Body.String())
	}
	if len(seen) != 1 || seen[0] != "7" {
		t.Fatalf("handler saw token headers %v, want [7]", seen)
	}
	// Reads still pass unchecked.
	if w := (req{method: http.MethodGet}).do(h); w.Code != http.StatusOK {
		t.Fatalf("GET: %d", w.Code)
	}
}

// The sequencer header name can be changed, and key rotation at the verifier takes effect on
// the next request.
func TestMiddlewareSequencerHeaderAndRotation(t *testing.T) {
	c := newCluster(t, "c1", 1)
	a := fence.NewAdmitter(fence.NewMemoryTokenStore())
	h := fence.Middleware(a, fence.WithSequencerHeader("X-Seq"), fence.WithSequencers(fence.NewSequencers(c.verifier, nil)))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	if w := (req{headers: hdr("Fencing-Key", "k", "X-Seq", c.seq(t, "k", 1))}).do(h); w.Code != http.StatusOK {
		t.Fatalf("custom header: %d %s", w.Code, w.Body.String())
	}
	k2, _ := sequencer.GenerateKey(bytes.NewReader(bytes.Repeat([]byte{7}, 32)), "k2", time.Unix(0, 0))
	if err := c.signer.Rotate(k2); err != nil {
		t.Fatal(err)
	}
	if w := (req{headers: hdr("Fencing-Key", "k", "X-Seq", c.seq(t, "k", 2))}).do(h); w.Code != http.StatusForbidden {
		t.Fatalf("a key the verifier has not pinned yet: %d, want 403", w.Code)
	}
	if err := c.verifier.SetKeySet(c.signer.KeySet()); err != nil {
		t.Fatal(err)
	}
	if w := (req{headers: hdr("Fencing-Key", "k", "X-Seq", c.seq(t, "k", 2))}).do(h); w.Code != http.StatusOK {
		t.Fatalf("after pinning the new key: %d %s", w.Code, w.Body.String())
	}
}

// TestSequencersCheckModeAndSlot: a reader's grant of a read/write lock never passes for the
// writer's, and one slot's grant of a semaphore never passes for another slot's key; a read
// takes the reader's grant.
func TestSequencersCheckModeAndSlot(t *testing.T) {
	c := newCluster(t, "c1", 1)
	sign := func(q sequencer.Sequencer) string {
		q.LeaseID, q.IssuedUnixMs = "lease-1", 1
		s, err := c.signer.SignString(q)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	reader := sign(sequencer.Sequencer{Name: "rw", Token: 7, Mode: sequencer.Shared})
	writer := sign(sequencer.Sequencer{Name: "rw", Token: 8})
	slot0 := sign(sequencer.Sequencer{Name: "enc", Token: 9})
	slot2 := sign(sequencer.Sequencer{Name: "enc", Token: 10, Slot: 2})
	s := fence.NewSequencers(c.verifier, fence.SlotKeys(nil))
	byMap := fence.NewSequencers(c.verifier, fence.LockMap(map[string]string{"enc/slot/2": "enc"}, nil))
	for _, tc := range []struct {
		name     string
		s        *fence.Sequencers
		key, seq string
		read     bool
		want     error
	}{
		{"the writer writes", s, "rw", writer, false, nil},
		{"a reader writes", s, "rw", reader, false, sequencer.ErrWrongMode},
		{"a reader reads", s, "rw", reader, true, nil},
		{"slot 2 writes its key", s, "enc/slot/2", slot2, false, nil},
		{"slot 0 writes slot 2's key", s, "enc/slot/2", slot0, false, sequencer.ErrWrongSlot},
		{"slot 2 writes slot 0's key", s, "enc/slot/0", slot2, false, sequencer.ErrWrongSlot},
		{"a non-canonical slot key is no slot key", s, "enc/slot/02", slot2, false, sequencer.ErrWrongLock},
		{"a mapped slot key checks the slot", byMap, "enc/slot/2", slot0, false, sequencer.ErrWrongSlot},
		{"a mapped slot key takes its slot", byMap, "enc/slot/2", slot2, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			verify := tc.s.Verify
			if tc.read {
				verify = tc.s.VerifyRead
			}
			_, err := verify(tc.key, tc.seq)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Verify(%q) = %v, want %v", tc.key, err, tc.want)
			}
		})
	}
}
