package api

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"

	"connectrpc.com/connect"

	leaseholdv1 "github.com/leasehold/leasehold/api/leaseholdv1"
)

// Code is a leasehold error code. Codes are stable strings; the same code is
// used by the Go client, in the RPC status detail, in the CLI's JSON output
// and (through ExitCode) in the CLI's exit status.
type Code string

// The error codes. docs/operating/limits-and-errors.md says what a caller
// should do with each.
const (
	CodeInternal          Code = "internal"           // a bug or an unexpected failure
	CodeInvalidArgument   Code = "invalid-argument"   // input outside the documented limits
	CodeNotHolder         Code = "not-holder"         // (name, lease_id, token) is not the current holding
	CodeStaleToken        Code = "stale-token"        // a fenced write's token is older than the last accepted
	CodeLeaseExpired      Code = "lease-expired"      // the session expired, was closed, or never existed
	CodeLockDelay         Code = "lock-delay"         // the name is in lock-delay after its holder expired
	CodeLocked            Code = "locked"             // TryAcquire: the name is held by another session
	CodeDeadlineExceeded  Code = "deadline-exceeded"  // the wait or the request's deadline ran out
	CodeResourceExhausted Code = "resource-exhausted" // a server limit (sessions, waiters, keys) is reached
	CodePermissionDenied  Code = "permission-denied"  // the caller may not do this
	CodeNotLeader         Code = "not-leader"         // this node cannot serve the write and no leader is known
	CodeUnavailable       Code = "unavailable"        // no quorum or no server reachable; safe to retry
	CodeOutcomeUnknown    Code = "outcome-unknown"    // leadership was lost mid-write: it may or may not have applied
	CodeNotFound          Code = "not-found"          // the KV key does not exist
	CodeCompacted         Code = "compacted"          // a watch's events are no longer in the node's history: read the state, watch again
	CodeCanceled          Code = "canceled"           // the caller cancelled the call (Ctrl-C)
)

type codeInfo struct {
	connect connect.Code
	exit    int
}

// CodeResyncRequired is the former name of CodeCompacted.
//
// Deprecated: use CodeCompacted.
const CodeResyncRequired = CodeCompacted

// codes is the one table mapping a leasehold code to its RPC code and the
// CLI's exit status. Exit status 1 is also used for failures that are not
// leasehold errors (the CLI could not even start the call).
var codes = map[Code]codeInfo{
	CodeInternal:          {connect.CodeInternal, 1},
	CodeInvalidArgument:   {connect.CodeInvalidArgument, 2},
	CodeNotHolder:         {connect.CodeFailedPrecondition, 3},
	CodeStaleToken:        {connect.CodeAborted, 4},
	CodeLeaseExpired:      {connect.CodeNotFound, 5},
	CodeLockDelay:         {connect.CodeUnavailable, 6},
	CodeLocked:            {connect.CodeAlreadyExists, 7},
	CodeDeadlineExceeded:  {connect.CodeDeadlineExceeded, 8},
	CodeResourceExhausted: {connect.CodeResourceExhausted, 9},
	CodePermissionDenied:  {connect.CodePermissionDenied, 10},
	CodeNotLeader:         {connect.CodeUnavailable, 11},
	CodeUnavailable:       {connect.CodeUnavailable, 12},
	CodeOutcomeUnknown:    {connect.CodeUnknown, 13},
	CodeNotFound:          {connect.CodeNotFound, 14},
	CodeCompacted:         {connect.CodeOutOfRange, 15},
	CodeCanceled:          {connect.CodeCanceled, 16},
}

// ExitCode is the CLI exit status for c (1 for an unknown code).
func (c Code) ExitCode() int {
	if info, ok := codes[c]; ok {
		return info.exit
	}
	return 1
}

// ConnectCode is the RPC status code that carries c.
func (c Code) ConnectCode() connect.Code {
	if info, ok := codes[c]; ok {
		return info.connect
	}
	return connect.CodeInternal
}

// Error is a leasehold error: a code, a message, and the details some codes
// carry. Two Errors match under errors.Is when their codes are equal, so
// sentinels such as client.ErrNotHolder match any error with that code.
type Error struct {
	Code    Code
	Message string
	// LastToken is the last accepted token (stale-token only).
	LastToken uint64
	// LeaderAddr is the leader's API address (not-leader only, when known).
	LeaderAddr string
}

// Errorf returns an *Error with code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "leasehold: " + string(e.Code)
	}
	return "leasehold: " + string(e.Code) + ": " + e.Message
}

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code
}

// CodeOf returns the code of err: its *Error code, deadline-exceeded for
// context deadlines, the code carried by an RPC status, or internal.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	if e := FromError(err); e != nil {
		return e.Code
	}
	return CodeInternal
}

// FromError extracts the leasehold error from err: an *Error in its chain,
// or the ErrorDetail (or failing that, the status code) of an RPC error.
// It returns nil for nil.
func FromError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		if det := detailOf(ce); det != nil {
			return &Error{Code: Code(det.GetCode()), Message: ce.Message(), LastToken: det.GetLastToken(), LeaderAddr: det.GetLeaderApiAddr()}
		}
		return &Error{Code: fromConnectCode(ce.Code()), Message: ce.Message()}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: CodeDeadlineExceeded, Message: err.Error()}
	case errors.Is(err, context.Canceled):
		return &Error{Code: CodeCanceled, Message: err.Error()}
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}

func fromConnectCode(c connect.Code) Code {
	switch c {
	case connect.CodeInvalidArgument, connect.CodeOutOfRange:
		return CodeInvalidArgument
	case connect.CodeDeadlineExceeded:
		return CodeDeadlineExceeded
	case connect.CodeCanceled:
		return CodeCanceled
	case connect.CodeResourceExhausted:
		return CodeResourceExhausted
	case connect.CodePermissionDenied, connect.CodeUnauthenticated:
		return CodePermissionDenied
	case connect.CodeUnavailable:
		return CodeUnavailable
	case connect.CodeNotFound:
		return CodeNotFound
	}
	return CodeInternal
}

// CodeHeader is the response header (a trailer in gRPC) that carries the
// leasehold code of an error, for HTTP callers that do not decode the
// protobuf ErrorDetail.
const CodeHeader = "Leasehold-Code"

// ToConnect turns err into an RPC error carrying its code in an ErrorDetail
// and in the Leasehold-Code header. Errors without a leasehold code become
// internal.
func ToConnect(err error) *connect.Error {
	e := FromError(err)
	ce := connect.NewError(e.Code.ConnectCode(), errors.New(e.Message))
	ce.Meta().Set(CodeHeader, string(e.Code))
	if d, derr := connect.NewErrorDetail(&leaseholdv1.ErrorDetail{Code: string(e.Code), LastToken: e.LastToken, LeaderApiAddr: e.LeaderAddr}); derr == nil {
		ce.AddDetail(d)
	}
	return ce
}

// IsServerError reports whether err carries a leasehold ErrorDetail: a
// leasehold server answered with this error. Errors without one arose in
// the transport (or in the caller).
func IsServerError(err error) bool {
	var ce *connect.Error
	return errors.As(err, &ce) && detailOf(ce) != nil
}

func detailOf(ce *connect.Error) *leaseholdv1.ErrorDetail {
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if det, ok := v.(*leaseholdv1.ErrorDetail); ok && det.GetCode() != "" {
				return det
			}
		}
	}
	return nil
}

// NotSent reports whether err is a failure to connect: the request never
// reached a leasehold server's handlers, so it was certainly not applied.
// Besides a failed dial this is a TLS handshake that failed (an https://
// endpoint that answers plain HTTP, an untrusted server certificate, or
// the server's TLS alert refusing the client certificate, which under TLS
// 1.3 arrives after the client sent its request but before the server
// read it, or a handshake that timed out: a port bound by a process that
// does not serve it yet, or is paused), and an answer in HTTP/1.1 where leasehold speaks HTTP/2 (a
// port that is not leasehold's API).
func NotSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var rh tls.RecordHeaderError
	var ce *tls.CertificateVerificationError
	if errors.Is(err, http.ErrSchemeMismatch) || errors.As(err, &rh) || errors.As(err, &ce) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "remote error: tls: ") || strings.Contains(msg, "net/http: TLS handshake timeout") ||
		strings.Contains(msg, "frame header looked like an HTTP/1.1 header")
}

// Refused reports whether err is a refused connection: nothing listens at
// the address.
func Refused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" && errors.Is(err, syscall.ECONNREFUSED)
}
