package client

import (
	"errors"

	"github.com/leasehold/leasehold/api"
)

// Errors returned by the server, matched with errors.Is: each matches any
// error carrying its code (api.Error.Is compares codes).
// docs/operating/limits-and-errors.md lists what to do with each.
var (
	ErrInvalidArgument   error = &api.Error{Code: api.CodeInvalidArgument}
	ErrNotHolder         error = &api.Error{Code: api.CodeNotHolder}
	ErrStaleToken        error = &api.Error{Code: api.CodeStaleToken}
	ErrLeaseExpired      error = &api.Error{Code: api.CodeLeaseExpired}
	ErrLockDelay         error = &api.Error{Code: api.CodeLockDelay}
	ErrLocked            error = &api.Error{Code: api.CodeLocked}
	ErrDeadlineExceeded  error = &api.Error{Code: api.CodeDeadlineExceeded}
	ErrResourceExhausted error = &api.Error{Code: api.CodeResourceExhausted}
	ErrPermissionDenied  error = &api.Error{Code: api.CodePermissionDenied}
	ErrNotLeader         error = &api.Error{Code: api.CodeNotLeader}
	ErrUnavailable       error = &api.Error{Code: api.CodeUnavailable}
	ErrOutcomeUnknown    error = &api.Error{Code: api.CodeOutcomeUnknown}
	ErrNotFound          error = &api.Error{Code: api.CodeNotFound}
	ErrCompacted         error = &api.Error{Code: api.CodeCompacted}
	ErrCanceled          error = &api.Error{Code: api.CodeCanceled}
)

// ErrResyncRequired is ErrCompacted, by its former name.
var ErrResyncRequired = ErrCompacted

// Local conditions of a Session or Lock.
var (
	// ErrLeaseLost: the lease may be lost — its local safe deadline passed
	// without a confirmed renewal, the server reported it expired, or the
	// session was orphaned. Stop the critical section.
	ErrLeaseLost = errors.New("client: lease may be lost")
	// ErrSessionClosed: the session was closed by Close.
	ErrSessionClosed = errors.New("client: session closed")
	// ErrReleased: the lock was released by Release.
	ErrReleased = errors.New("client: lock released")
	// ErrNoLeader: Leader found nobody elected for the name.
	ErrNoLeader = errors.New("client: no leader")
)
