package fence

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/sequencer"
)

// Verifying mode.
//
// A bare token cannot be told from a forged one: one request with token 2^64−1 raises a key's
// last token for good and bricks it. In verifying mode the writer presents a signed
// sequencer (package sequencer) instead, and it is checked against the cluster's pinned key
// set and against the lock configured for the key BEFORE its token is compared or recorded:
//
//	sequencer ──▶ Sequencers.Verify(key, s): signature, key id, cluster id, lock(key) == s.Name,
//	                   │                          exclusive (a write), slot K for key NAME/slot/K
//	                   │ refused: nothing compared, nothing recorded
//	                   ▼ accepted
//	              the usual token check with s.Token (Guard.Write, Admitter, Middleware)

// DefaultSequencerHeader carries the text form of a signed sequencer in verifying mode.
const DefaultSequencerHeader = "Fencing-Sequencer"

// CodePermissionDenied is the JSON error code of a refused sequencer (forged, altered, of
// another lock or cluster, or signed by an unknown key).
const CodePermissionDenied = "permission-denied"

// ErrNoLock means no lock is configured for the key in verifying mode, so every sequencer for
// it is refused.
var ErrNoLock = errors.New("fence: no lock configured for key")

// LockFunc returns the lock whose sequencers may write key, or an error (ErrNoLock) when no
// lock protects it.
type LockFunc func(key string) (lock string, err error)

// LockIsKey is the LockFunc for resources whose key is the lock name itself.
func LockIsKey(key string) (string, error) { return key, nil }

// SlotKeys returns a LockFunc that maps a semaphore's slot key NAME/slot/K (the key the holder
// of slot K fences, client.SlotKey) to the lock NAME, and any other key through fallback
// (LockIsKey when nil). Whatever LockFunc maps NAME/slot/K to NAME, a sequencer verifies for
// that key only when its grant holds slot K.
func SlotKeys(fallback LockFunc) LockFunc {
	if fallback == nil {
		fallback = LockIsKey
	}
	return func(key string) (string, error) {
		if i := strings.LastIndex(key, slotInfix); i > 0 {
			if _, ok := slotOf(key, key[:i]); ok {
				return key[:i], nil
			}
		}
		return fallback(key)
	}
}

const slotInfix = "/slot/"

// slotOf returns K when key is lock's slot key lock/slot/K, K in canonical decimal.
func slotOf(key, lock string) (uint32, bool) {
	rest, ok := strings.CutPrefix(key, lock+slotInfix)
	if !ok {
		return 0, false
	}
	k, err := strconv.ParseUint(rest, 10, 32)
	if err != nil || strconv.FormatUint(k, 10) != rest {
		return 0, false
	}
	return uint32(k), true
}

// LockMap returns a LockFunc reading m (key → lock); for a key not in m it calls fallback, or
// returns ErrNoLock when fallback is nil. m is copied.
func LockMap(m map[string]string, fallback LockFunc) LockFunc {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return func(key string) (string, error) {
		if lock, ok := c[key]; ok {
			return lock, nil
		}
		if fallback != nil {
			return fallback(key)
		}
		return "", fmt.Errorf("%w %q", ErrNoLock, key)
	}
}

// Sequencers verifies signed sequencers for resource keys: a sequencer is accepted for key k
// iff it verifies under the Verifier, names the lock LockFunc gives for k, holds it exclusive
// (a reader's grant passes only VerifyRead) and, when k is that lock's slot key NAME/slot/K,
// holds slot K. It is safe for concurrent use; rotate keys with the Verifier's SetKeySet.
type Sequencers struct {
	v    *sequencer.Verifier
	lock LockFunc
}

// NewSequencers returns a Sequencers over v and lock (LockIsKey when nil).
func NewSequencers(v *sequencer.Verifier, lock LockFunc) *Sequencers {
	if lock == nil {
		lock = LockIsKey
	}
	return &Sequencers{v: v, lock: lock}
}

// Verify checks the text form of a sequencer for a write to key and returns it. The error
// wraps ErrInvalidKey, ErrNoLock, or one of the sequencer package's errors (ErrMalformed,
// ErrVersion, ErrWrongCluster, ErrUnknownKey, ErrBadSignature, ErrKeyRetired, ErrWrongLock,
// ErrWrongMode for a shared grant, ErrWrongSlot for another slot's grant).
func (s *Sequencers) Verify(key, text string) (sequencer.Sequencer, error) {
	return s.verify(key, text, false)
}

// VerifyRead is Verify for a fenced read of key: a shared grant (a reader of a read/write
// lock) passes too.
func (s *Sequencers) VerifyRead(key, text string) (sequencer.Sequencer, error) {
	return s.verify(key, text, true)
}

func (s *Sequencers) verify(key, text string, read bool) (sequencer.Sequencer, error) {
	if err := ValidateKey(key); err != nil {
		return sequencer.Sequencer{}, err
	}
	lock, err := s.lock(key)
	if err != nil {
		return sequencer.Sequencer{}, err
	}
	q, err := s.v.VerifyString(text, lock)
	if err == nil && q.Mode != sequencer.Exclusive && !read {
		err = fmt.Errorf("%w: token %d holds %q %s; only its exclusive holder may write", sequencer.ErrWrongMode, q.Token, q.Name, q.Mode)
	}
	if k, ok := slotOf(key, lock); err == nil && ok && q.Slot != k {
		err = fmt.Errorf("%w: token %d holds slot %d of %q, the key is slot %d's", sequencer.ErrWrongSlot, q.Token, q.Slot, q.Name, k)
	}
	if err != nil {
		return sequencer.Sequencer{}, fmt.Errorf("fence: sequencer for key %q: %w", key, err)
	}
	return q, nil
}

// Guard returns g in verifying mode.
func (s *Sequencers) Guard(g Guard) *SequencedGuard { return &SequencedGuard{g: g, s: s} }

// SequencedGuard is a Guard that takes signed sequencers instead of bare tokens.
type SequencedGuard struct {
	g Guard
	s *Sequencers
}

// Write verifies seq (text form) for key and then writes value with its token through the
// underlying Guard. A sequencer that does not verify is refused with the error of
// Sequencers.Verify and the guard is not touched: its last token cannot move.
func (sg *SequencedGuard) Write(ctx context.Context, key, seq string, value []byte) error {
	q, err := sg.s.Verify(key, seq)
	if err != nil {
		return err
	}
	return sg.g.Write(ctx, key, q.Token, value)
}

// Last returns the underlying Guard's last token and value for key.
func (sg *SequencedGuard) Last(ctx context.Context, key string) (uint64, []byte, error) {
	return sg.g.Last(ctx, key)
}

// Admit is Admitter.Admit in verifying mode: seq is verified for key first, then effect runs
// iff its token is not stale.
func (s *Sequencers) Admit(ctx context.Context, a *Admitter, key, seq string, effect func(context.Context) error) error {
	q, err := s.Verify(key, seq)
	if err != nil {
		return err
	}
	return a.Admit(ctx, key, q.Token, effect)
}

// sequencerOptions are Middleware's verifying-mode settings.
type sequencerOptions struct {
	s      *Sequencers
	header string
}

// WithSequencers puts Middleware in verifying mode: each fenced request carries the text form
// of a signed sequencer in the Fencing-Sequencer header (see WithSequencerHeader), which must
// verify for the request's key before its token is checked:
//
//   - missing, repeated or malformed sequencer, or one of the old version 1: 400
//     invalid-argument;
//   - forged or altered, signed by an unknown or retired key, from another cluster, for
//     another lock than the key's, a reader's (shared) grant for a write, another slot's
//     grant for a slot key NAME/slot/K, or no lock configured for the key: 403
//     permission-denied;
//   - a Fencing-Token header, if also sent, must equal the sequencer's token (else 400).
//
// The verified token then replaces the token header for the usual check (and for the
// handler, or the upstream of a gateway, to read). Refused requests record nothing.
func WithSequencers(s *Sequencers) HTTPOption {
	return func(o *httpOptions) {
		if o.seq == nil {
			o.seq = &sequencerOptions{header: DefaultSequencerHeader}
		}
		o.seq.s = s
	}
}

// WithSequencerHeader sets the header carrying the sequencer in verifying mode (default
// DefaultSequencerHeader).
func WithSequencerHeader(name string) HTTPOption {
	return func(o *httpOptions) {
		if o.seq == nil {
			o.seq = &sequencerOptions{}
		}
		o.seq.header = http.CanonicalHeaderKey(name)
	}
}

// withSequencers wraps h in the verifying mode when it is configured.
func (o httpOptions) withSequencers(h *admitHandler) http.Handler {
	if o.seq == nil || o.seq.s == nil {
		return h
	}
	return &verifyHandler{o: o, next: h}
}

// verifyHandler verifies a request's sequencer and hands it to the admitHandler with the
// verified token in the token header.
type verifyHandler struct {
	o    httpOptions
	next http.Handler
}

func (h *verifyHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.o.fenceReads && isRead(r.Method) {
		h.next.ServeHTTP(w, r)
		return
	}
	text, err := singleHeader(r, h.o.seq.header)
	if err != nil {
		invalid(w, "fence: "+err.Error())
		return
	}
	key, err := h.o.keyFunc(r)
	if err != nil {
		invalid(w, "fence: key: "+err.Error())
		return
	}
	q, err := h.o.seq.s.verify(key, text, isRead(r.Method))
	switch {
	case errors.Is(err, sequencer.ErrMalformed), errors.Is(err, sequencer.ErrVersion), errors.Is(err, ErrInvalidKey):
		invalid(w, err.Error())
		return
	case err != nil:
		h.o.logger.Warn("fence: sequencer refused", "method", r.Method, "path", r.URL.Path, "key", key, "err", err)
		WriteHTTPError(w, http.StatusForbidden, HTTPError{Code: CodePermissionDenied, Message: err.Error(), Key: key})
		return
	}
	tok := strconv.FormatUint(q.Token, 10)
	if vs := r.Header.Values(h.o.tokenHeader); len(vs) > 0 && (len(vs) > 1 || vs[0] != tok) {
		invalid(w, fmt.Sprintf("fence: %s %q disagrees with the sequencer's token %s", h.o.tokenHeader, vs, tok))
		return
	}
	r = r.Clone(r.Context())
	r.Header.Set(h.o.tokenHeader, tok)
	h.next.ServeHTTP(w, r)
}
