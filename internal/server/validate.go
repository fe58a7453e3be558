package server

import (
	"errors"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/internal/admission"
	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
	"github.com/leasehold/leasehold/internal/lessor"
	"github.com/leasehold/leasehold/internal/raftnode"
)

// The limits enforced at the API edge. docs/operating/limits-and-errors.md
// lists each one.
const (
	MaxNameLen     = 256                           // lock names, KV keys, prefixes (bytes)
	MaxOwnerLen    = 128                           // owner labels (bytes)
	MaxValueLen    = 64 << 10                      // KV values (bytes)
	MinTTL         = time.Second                   // shorter TTLs are raised to this
	MaxTTL         = time.Hour                     // longer TTLs are refused
	MaxLockDelay   = 60 * time.Second              // longer lock-delays are lowered to this
	MaxWait        = time.Hour                     // the longest server-side queue wait
	MaxListLimit   = 1000                          // locks returned by one List
	MaxRequestSize = admission.DefaultRequestBytes // bytes of one request message
	leaseIDLen     = 32                            // hex characters of a lease id
)

// nameChar reports whether c may appear in a lock name, KV key or prefix.
func nameChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '.', '_', '-', ':', '/', '@', '=', '+':
		return true
	}
	return false
}

func checkNameLike(what, s string, allowEmpty bool) error {
	if s == "" {
		if allowEmpty {
			return nil
		}
		return api.Errorf(api.CodeInvalidArgument, "%s is empty", what)
	}
	if len(s) > MaxNameLen {
		return api.Errorf(api.CodeInvalidArgument, "%s is %d bytes; the limit is %d", what, len(s), MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		if !nameChar(s[i]) {
			return api.Errorf(api.CodeInvalidArgument, "%s has character %q at byte %d; allowed are A-Z a-z 0-9 and . _ - : / @ = +", what, s[i], i)
		}
	}
	return nil
}

func checkName(s string) error   { return checkNameLike("lock name", s, false) }
func checkKey(s string) error    { return checkNameLike("key", s, false) }
func checkPrefix(s string) error { return checkNameLike("prefix", s, true) }

func checkOwner(s string) error {
	if len(s) > MaxOwnerLen {
		return api.Errorf(api.CodeInvalidArgument, "owner is %d bytes; the limit is %d", len(s), MaxOwnerLen)
	}
	if !utf8.ValidString(s) {
		return api.Errorf(api.CodeInvalidArgument, "owner is not valid UTF-8")
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return api.Errorf(api.CodeInvalidArgument, "owner has unprintable character %U", r)
		}
	}
	return nil
}

func checkLeaseID(s string) error {
	if len(s) != leaseIDLen {
		return api.Errorf(api.CodeInvalidArgument, "lease id must be %d hex characters, got %d", leaseIDLen, len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return api.Errorf(api.CodeInvalidArgument, "lease id has non-hex character %q", c)
		}
	}
	return nil
}

// grantTTL checks a requested TTL: above MaxTTL is refused (a caller that
// asked for 2 h must not believe it got it), below MinTTL is raised to it.
func grantTTL(ms int64) (time.Duration, error) {
	if ms <= 0 {
		return 0, api.Errorf(api.CodeInvalidArgument, "ttl must be > 0, got %dms", ms)
	}
	if ms > int64(MaxTTL/time.Millisecond) {
		return 0, api.Errorf(api.CodeInvalidArgument, "ttl %dms is above the maximum %v", ms, MaxTTL)
	}
	return max(time.Duration(ms)*time.Millisecond, MinTTL), nil
}

// lockDelay checks a requested lock-delay and caps it at MaxLockDelay.
func lockDelay(ms int64) (time.Duration, error) {
	if ms < 0 {
		return 0, api.Errorf(api.CodeInvalidArgument, "lock_delay must be ≥ 0, got %dms", ms)
	}
	// Compare before converting: ms·10⁶ wraps for ms > 9.2·10¹².
	if ms >= MaxLockDelay.Milliseconds() {
		return MaxLockDelay, nil
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func checkWait(ms int64) (time.Duration, error) {
	if ms < 0 || ms > int64(MaxWait/time.Millisecond) {
		return 0, api.Errorf(api.CodeInvalidArgument, "wait must be in [0, %s], got %dms", MaxWait, ms)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func checkToken(t uint64) error {
	if t == 0 {
		return api.Errorf(api.CodeInvalidArgument, "token must be > 0")
	}
	return nil
}

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
