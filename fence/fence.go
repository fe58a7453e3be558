package fence

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits.
const (
	// MaxKeyLen is the longest resource key, in bytes.
	MaxKeyLen = 256
	// maxTokenDigits is the length of the longest decimal uint64 (18446744073709551615).
	maxTokenDigits = 20
)

// Mode selects the acceptance rule of a guard.
type Mode int

const (
	// Monotonic accepts a token t for key k iff t >= last(k): the current holder may write
	// many times with the same token. This is the default.
	Monotonic Mode = iota
	// Strict accepts t iff t > last(k): one accepted effect per lock generation (seed 000).
	Strict
)

// String returns "monotonic" or "strict".
func (m Mode) String() string {
	switch m {
	case Monotonic:
		return "monotonic"
	case Strict:
		return "strict"
	default:
		return "Mode(" + strconv.Itoa(int(m)) + ")"
	}
}

// Admits reports whether a write with token is accepted when last is the last accepted token
// (0 when none). It is the one comparison every guard implements.
func (m Mode) Admits(token, last uint64) bool {
	if m == Strict {
		return token > last
	}
	return token >= last
}

// Guard is a fenced key/value resource: it stores a value per key together with the last
// accepted token, and refuses writes whose token is stale.
//
// Implementations are safe for concurrent use by multiple goroutines (and, for the store-backed
// guards, by multiple processes sharing the store).
type Guard interface {
	// Write stores value under key iff token is not stale for key under the guard's Mode; the
	// check, the store of value and the update of the key's last token are one atomic step.
	// It returns nil when accepted, an error matching ErrStaleToken (a *StaleTokenError) when
	// refused, ErrInvalidKey or ErrInvalidToken for bad input, or a store error (the write
	// may or may not have happened only when the store itself cannot tell, e.g. a connection
	// lost during commit). A refused or invalid write changes nothing.
	Write(ctx context.Context, key string, token uint64, value []byte) error

	// Last returns the last accepted token for key and the value stored with it; (0, nil, nil)
	// when no write was ever accepted for key. The value is nil when the key's token was
	// advanced by a general-form Do without a value.
	Last(ctx context.Context, key string) (token uint64, value []byte, err error)
}

// Option configures a guard or an Admitter. Options that do not apply to a guard (WithTable on
// Redis, WithKeyPrefix on PostgreSQL) are ignored by it.
type Option func(*Settings)

// Settings is what a list of Options comes to; the guards of the driver packages
// (fence/pgfence, fence/redisfence, fence/sqlitefence) read it with Apply.
type Settings struct {
	Mode         Mode
	Table        string        // PostgreSQL, SQLite: the fence table
	KeyPrefix    string        // Redis: prefixed to a key to name its fence hash
	WaitReplicas int           // Redis: replicas to WAIT for after an accepted write
	WaitTimeout  time.Duration // Redis: bound on that WAIT
}

// DefaultTable is the fence table of the PostgreSQL and SQLite guards.
const DefaultTable = "leasehold_fence"

// DefaultRedisPrefix is prefixed to a key to name its Redis fence hash.
const DefaultRedisPrefix = "leasehold:fence:"

// Apply returns the settings opts make, starting from the defaults (Monotonic, DefaultTable,
// DefaultRedisPrefix, no WAIT).
func Apply(opts ...Option) Settings {
	o := Settings{Mode: Monotonic, Table: DefaultTable, KeyPrefix: DefaultRedisPrefix}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithMode sets the acceptance rule (default Monotonic).
func WithMode(m Mode) Option { return func(o *Settings) { o.Mode = m } }

// WithTable sets the fence table of the PostgreSQL and SQLite guards (default DefaultTable).
// For PostgreSQL it may be schema-qualified ("app.fence").
func WithTable(name string) Option { return func(o *Settings) { o.Table = name } }

// WithKeyPrefix sets the prefix of the Redis guard's fence keys (default DefaultRedisPrefix).
func WithKeyPrefix(prefix string) Option { return func(o *Settings) { o.KeyPrefix = prefix } }

// WithRedisWait makes the Redis guard (redisfence), after every accepted Write or Do, send WAIT n timeout
// on the same connection: the call succeeds only once n replicas acknowledged the write. If
// fewer did within timeout, it returns an error wrapping ErrNotDurable — the write WAS applied
// on the primary (the fence advanced there), but a failover now could lose it; treat the
// outcome as unknown. It needs a *redis.Client (WAIT counts the writes of one connection);
// with another client every write fails with ErrNotDurable. WAIT narrows the window in which
// a failover rolls the fence back but does not close it. n ≤ 0 turns it off (the default).
func WithRedisWait(n int, timeout time.Duration) Option {
	return func(o *Settings) { o.WaitReplicas, o.WaitTimeout = n, timeout }
}

// ValidateKey returns an error wrapping ErrInvalidKey unless key is 1..MaxKeyLen bytes of
// UTF-8 without NUL.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, longer than %d", ErrInvalidKey, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidKey)
	case strings.IndexByte(key, 0) >= 0:
		return fmt.Errorf("%w: contains NUL", ErrInvalidKey)
	}
	return nil
}

// ValidateWrite returns an error wrapping ErrInvalidKey or ErrInvalidToken unless key is
// valid (ValidateKey) and token is greater than 0: the input check of every guard's write.
func ValidateWrite(key string, token uint64) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if token == 0 {
		return fmt.Errorf("%w: token 0", ErrInvalidToken)
	}
	return nil
}

// ParseToken parses a token as carried in text (the Fencing-Token header, a CLI flag): a
// canonical decimal uint64 greater than 0 — digits only, no sign, no spaces, no leading zeros,
// at most 20 digits. Anything else wraps ErrInvalidToken.
func ParseToken(s string) (uint64, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: empty", ErrInvalidToken)
	}
	if len(s) > maxTokenDigits {
		return 0, fmt.Errorf("%w: longer than %d digits", ErrInvalidToken, maxTokenDigits)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%w: %q is not a decimal number", ErrInvalidToken, s)
		}
	}
	if s[0] == '0' {
		return 0, fmt.Errorf("%w: %q: 0 or leading zero", ErrInvalidToken, s)
	}
	t, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q overflows uint64", ErrInvalidToken, s)
	}
	return t, nil
}

// PadToken renders t as 20 zero-padded decimal digits, whose byte order is numeric order: how
// a store without a uint64 type keeps a token.
func PadToken(t uint64) string { return fmt.Sprintf("%020d", t) }

// ParseStoredToken parses a token read back from a store (decimal, possibly zero-padded).
func ParseStoredToken(s string) (uint64, error) {
	t, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("fence: corrupt stored token %q: %w", s, err)
	}
	return t, nil
}
