// Package validate checks the fields of a request against the limits of
// the API edge: names, keys and prefixes, owner labels, lease ids, TTLs,
// lock-delays, queue waits and tokens. Each check is a pure function that
// returns nil or an invalid-argument api.Error naming the field and the
// limit; docs/operating/limits-and-errors.md lists each limit. The server
// calls them before it proposes anything, so a refused request changes
// nothing.
package validate

import (
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/leasehold/leasehold/api"
)

// The limits of one request's fields.
const (
	MaxNameLen   = 256              // lock names, KV keys, prefixes (bytes)
	MaxOwnerLen  = 128              // owner labels (bytes)
	MaxValueLen  = 64 << 10         // KV values (bytes)
	MinTTL       = time.Second      // shorter TTLs are raised to this
	MaxTTL       = time.Hour        // longer TTLs are refused
	MaxLockDelay = 60 * time.Second // longer lock-delays are lowered to this
	MaxWait      = time.Hour        // the longest server-side queue wait
	MaxListLimit = 1000             // locks returned by one List
	LeaseIDLen   = 32               // hex characters of a lease id
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

// NameLike checks s, called what in the refusal, as Name; allowEmpty
// lets the empty string pass.
func NameLike(what, s string, allowEmpty bool) error {
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

// Name checks a lock name: 1..MaxNameLen bytes of A-Z a-z 0-9 . _ - : / @ = +.
func Name(s string) error { return NameLike("lock name", s, false) }

// Key checks a KV key, as Name.
func Key(s string) error { return NameLike("key", s, false) }

// Prefix checks a prefix of names or keys, as Name, empty allowed.
func Prefix(s string) error { return NameLike("prefix", s, true) }

// Owner checks an owner label: at most MaxOwnerLen bytes of printable UTF-8.
func Owner(s string) error {
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

// LeaseID checks a lease id: LeaseIDLen lower-case hex characters.
func LeaseID(s string) error {
	if len(s) != LeaseIDLen {
		return api.Errorf(api.CodeInvalidArgument, "lease id must be %d hex characters, got %d", LeaseIDLen, len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return api.Errorf(api.CodeInvalidArgument, "lease id has non-hex character %q", c)
		}
	}
	return nil
}

// TTL checks a requested TTL: above MaxTTL is refused (a caller that
// asked for 2 h must not believe it got it), below MinTTL is raised to it.
func TTL(ms int64) (time.Duration, error) {
	if ms <= 0 {
		return 0, api.Errorf(api.CodeInvalidArgument, "ttl must be > 0, got %dms", ms)
	}
	if ms > int64(MaxTTL/time.Millisecond) {
		return 0, api.Errorf(api.CodeInvalidArgument, "ttl %dms is above the maximum %v", ms, MaxTTL)
	}
	return max(time.Duration(ms)*time.Millisecond, MinTTL), nil
}

// LockDelay checks a requested lock-delay and caps it at MaxLockDelay.
func LockDelay(ms int64) (time.Duration, error) {
	if ms < 0 {
		return 0, api.Errorf(api.CodeInvalidArgument, "lock_delay must be ≥ 0, got %dms", ms)
	}
	// Compare before converting: ms·10⁶ wraps for ms > 9.2·10¹².
	if ms >= MaxLockDelay.Milliseconds() {
		return MaxLockDelay, nil
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// Wait checks a server-side queue wait: 0 (until the caller goes away) to MaxWait.
func Wait(ms int64) (time.Duration, error) {
	if ms < 0 || ms > int64(MaxWait/time.Millisecond) {
		return 0, api.Errorf(api.CodeInvalidArgument, "wait must be in [0, %s], got %dms", MaxWait, ms)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// Token checks a fencing token a request names: never 0.
func Token(t uint64) error {
	if t == 0 {
		return api.Errorf(api.CodeInvalidArgument, "token must be > 0")
	}
	return nil
}

// Acquire checks the name, lease id and lock-delay of an Acquire or
// TryAcquire and returns the lock-delay to grant (LockDelay).
func Acquire(name, leaseID string, delayMs int64) (time.Duration, error) {
	if err := Name(name); err != nil {
		return 0, err
	}
	if err := LeaseID(leaseID); err != nil {
		return 0, err
	}
	return LockDelay(delayMs)
}

// Holding checks the (name, lease id, token) a request names a holding by.
func Holding(name, leaseID string, token uint64) error {
	if err := Name(name); err != nil {
		return err
	}
	if err := LeaseID(leaseID); err != nil {
		return err
	}
	return Token(token)
}
