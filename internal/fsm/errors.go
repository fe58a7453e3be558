package fsm

import (
	"errors"
	"fmt"
)

// Business refusals. Apply returns them as values in Result.Err; they never
// change the state. The server maps each to an API code in one table.
var (
	// ErrNotHolder: (name, lease_id, token) is not the current holding.
	ErrNotHolder = errors.New("fsm: not the current holder")
	// ErrStaleToken: a fenced write's token is older than the last accepted
	// one. Apply wraps it in a *StaleTokenError carrying that token.
	ErrStaleToken = errors.New("fsm: stale token")
	// ErrSessionNotFound: the session expired, was closed, or never existed.
	ErrSessionNotFound = errors.New("fsm: session not found")
	// ErrSessionExists: a CreateSession reused a lease id (a proposer bug).
	ErrSessionExists = errors.New("fsm: session exists")
	// ErrLocked: TryAcquire found the name held or queued for by another session.
	ErrLocked = errors.New("fsm: lock held by another session")
	// ErrLockDelay: TryAcquire found the name in lock-delay.
	ErrLockDelay = errors.New("fsm: lock in lock-delay")
	// ErrTooManySessions: Limits.MaxSessions sessions exist.
	ErrTooManySessions = errors.New("fsm: too many sessions")
	// ErrTooManyWaiters: Limits.MaxWaitersPerName sessions are queued for the name.
	ErrTooManyWaiters = errors.New("fsm: too many waiters for the lock")
	// ErrTooManyLocks: the session holds or waits for Limits.MaxLocksPerSession names.
	ErrTooManyLocks = errors.New("fsm: too many locks for the session")
	// ErrTooManyKeys: the fenced KV holds Limits.MaxKVKeys keys.
	ErrTooManyKeys = errors.New("fsm: too many KV keys")
	// ErrInvalidToken: a fenced write carried token 0 or a token never issued.
	ErrInvalidToken = errors.New("fsm: invalid token")
	// ErrKeyNotFound: a KV delete named a key that was never written.
	ErrKeyNotFound = errors.New("fsm: key not found")
	// ErrQuota: the command would grow the state past Limits.MaxStateBytes.
	// Apply wraps it in a *QuotaError.
	ErrQuota = errors.New("fsm: state quota reached")
	// ErrInvalidMode: an Acquire's mode or permits are invalid or differ from
	// the name's (a *PermitsError then says the name's permits).
	ErrInvalidMode = errors.New("fsm: invalid lock mode")
	// ErrWithdrawn: an Acquire's wait id was withdrawn (CancelWait) before
	// the Acquire was applied.
	ErrWithdrawn = errors.New("fsm: the request was withdrawn before it arrived")
)

// StaleTokenError is the refusal of a fenced write whose token is stale.
type StaleTokenError struct {
	Key       string
	Token     uint64
	LastToken uint64
	Strict    bool
}

func (e *StaleTokenError) Error() string {
	op := ">="
	if e.Strict {
		op = ">"
	}
	return fmt.Sprintf("fsm: stale token %d for key %q: the resource accepts only tokens %s %d", e.Token, e.Key, op, e.LastToken)
}

// Unwrap makes errors.Is(err, ErrStaleToken) true.
func (e *StaleTokenError) Unwrap() error { return ErrStaleToken }
