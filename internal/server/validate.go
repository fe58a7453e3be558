package server

import (
	"errors"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/internal/admission"
	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
	"github.com/leasehold/leasehold/internal/lessor"
	"github.com/leasehold/leasehold/internal/raftnode"
)

// MaxRequestSize is the default bound on the bytes of one request message
// (serve --limit request-bytes); the limits of its fields are package
// validate's. docs/operating/limits-and-errors.md lists each one.
const MaxRequestSize = admission.DefaultRequestBytes

// checkPolicyBytes refuses a policy whose encoding is longer than
// auth.MaxPolicyBytes, so that the auth state stays within its documented
// size whatever its policies hold.
func checkPolicyBytes(p *fsmpb.AuthPolicy) error {
	if n := proto.Size(p); n > auth.MaxPolicyBytes {
		return api.Errorf(api.CodeResourceExhausted, "policy %q is %d bytes; the limit is %d: name fewer or shorter principals and prefixes", p.GetName(), n, auth.MaxPolicyBytes)
	}
	return nil
}

// toAPI maps the errors of the packages below the API edge to API codes.
// It is the one table of that mapping; anything unmapped is internal.
func toAPI(err error) error {
	if err == nil {
		return nil
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		return err
	}
	var stale *fsm.StaleTokenError
	if errors.As(err, &stale) {
		return &api.Error{Code: api.CodeStaleToken, Message: message(stale), LastToken: stale.LastToken}
	}
	table := []struct {
		err  error
		code api.Code
	}{
		{fsm.ErrNotHolder, api.CodeNotHolder},
		{fsm.ErrSessionNotFound, api.CodeLeaseExpired},
		{lessor.ErrNotFound, api.CodeLeaseExpired},
		{lessor.ErrExpiring, api.CodeUnavailable},
		{lessor.ErrUnconfirmed, api.CodeUnavailable},
		{fsm.ErrLocked, api.CodeLocked},
		{fsm.ErrLockDelay, api.CodeLockDelay},
		{fsm.ErrTooManySessions, api.CodeResourceExhausted},
		{fsm.ErrTooManyWaiters, api.CodeResourceExhausted},
		{fsm.ErrTooManyLocks, api.CodeResourceExhausted},
		{fsm.ErrTooManyKeys, api.CodeResourceExhausted},
		{fsm.ErrQuota, api.CodeResourceExhausted},
		{fsm.ErrKeyNotFound, api.CodeNotFound},
		{fsm.ErrInvalidToken, api.CodeInvalidArgument},
		{fsm.ErrInvalidMode, api.CodeInvalidArgument},
		{fsm.ErrWithdrawn, api.CodeCanceled},
		{raftnode.ErrNotLeader, api.CodeNotLeader},
		{lessor.ErrNotLeader, api.CodeNotLeader},
		{raftnode.ErrUnavailable, api.CodeUnavailable},
		{raftnode.ErrShutdown, api.CodeUnavailable},
		{raftnode.ErrOutcomeUnknown, api.CodeOutcomeUnknown},
		{raftnode.ErrWouldLoseQuorum, api.CodeInvalidArgument},
		{raftnode.ErrStandalone, api.CodeInvalidArgument},
		{raftnode.ErrClusterMismatch, api.CodePermissionDenied},
	}
	for _, e := range table {
		if errors.Is(err, e.err) {
			return &api.Error{Code: e.code, Message: message(err)}
		}
	}
	return &api.Error{Code: api.CodeInternal, Message: err.Error()}
}

// message is err's text for a caller: without the names of the packages
// below the API edge ("fsm: ", "raftnode: ", ...), which mean nothing to it.
func message(err error) string {
	msg := err.Error()
	for _, p := range []string{"fsm: ", "raftnode: ", "lessor: ", "raft: "} {
		msg = strings.ReplaceAll(msg, p, "")
	}
	return msg
}
