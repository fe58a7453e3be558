package fence

import (
	"errors"
	"fmt"
)

// Sentinel errors. Match them with errors.Is; every error a guard returns for one of these
// conditions wraps the sentinel.
var (
	// ErrStaleToken means the token is older than the last token accepted for the key (or
	// equal to it, in Strict mode). Nothing was written. The concrete error is a
	// *StaleTokenError carrying the last accepted token. The caller should stop: a newer lock
	// holder exists.
	ErrStaleToken = errors.New("fence: stale token")

	// ErrInvalidToken means the token is 0, or (as text) not a canonical decimal uint64.
	// Nothing was written.
	ErrInvalidToken = errors.New("fence: invalid token")

	// ErrInvalidKey means the key is empty, longer than MaxKeyLen bytes, not valid UTF-8, or
	// contains NUL. Nothing was written.
	ErrInvalidKey = errors.New("fence: invalid key")

	// ErrAdmissionDone means Commit was called on an Admission that was already released.
	ErrAdmissionDone = errors.New("fence: admission already released")

	// ErrNotDurable means a store's configuration cannot keep the fence across a restart or
	// failover (redisfence.CheckDurable), so a checked guard refuses to run on it.
	ErrNotDurable = errors.New("fence: store not durable enough to keep the fence")

	// ErrTooManyKeys means a token store is at its bound on keys (boltfence.Store.MaxKeys) and
	// refused a new key. Nothing was recorded; known keys still work. Drop idle keys
	// (boltfence.Store.DropIdle) or raise the bound.
	ErrTooManyKeys = errors.New("fence: too many keys")

	// ErrClosed means the token store was closed.
	ErrClosed = errors.New("fence: closed")

	// errResponseReplaced is returned to a handler writing after Middleware replaced its
	// response with an error (the token could not be recorded).
	errResponseReplaced = errors.New("fence: response replaced by an error")
)

// StaleTokenError is the error a guard returns when it rejects a write. It matches
// ErrStaleToken with errors.Is.
type StaleTokenError struct {
	Key       string // the resource key
	Token     uint64 // the token that was refused
	LastToken uint64 // the last token accepted for Key when the write was refused
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("fence: stale token %d for key %q: last accepted token is %d", e.Token, e.Key, e.LastToken)
}

// Is reports whether target is ErrStaleToken.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }
