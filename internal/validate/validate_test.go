package validate

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/api"
)

// Each check accepts what the limits allow, refuses one step past them with
// invalid-argument naming the field, and normalises what it may.
func TestChecks(t *testing.T) {
	hex := strings.Repeat("a", LeaseIDLen)
	for _, c := range []struct {
		what string
		err  error
		want string // "" accepted; else a part of the refusal
	}{
		{"name", Name(strings.Repeat("n", MaxNameLen)), ""},
		{"name too long", Name(strings.Repeat("n", MaxNameLen+1)), "lock name is 257 bytes"},
		{"name empty", Name(""), "lock name is empty"},
		{"name space", Name("a b"), "character ' ' at byte 1"},
		{"key", Key("k:1/2@x=y+z"), ""},
		{"prefix empty", Prefix(""), ""},
		{"owner", Owner(strings.Repeat("ö", MaxOwnerLen/2)), ""},
		{"owner too long", Owner(strings.Repeat("o", MaxOwnerLen+1)), "owner is 129 bytes"},
		{"owner unprintable", Owner("a\x01"), "unprintable"},
		{"lease", LeaseID(hex), ""},
		{"lease upper", LeaseID(strings.ToUpper(hex)), "non-hex"},
		{"lease short", LeaseID(hex[1:]), "32 hex characters"},
		{"token", Token(1), ""},
		{"token 0", Token(0), "token must be > 0"},
		{"holding", Holding("x", hex, 0), "token must be > 0"},
	} {
		switch {
		case c.want == "" && c.err != nil:
			t.Errorf("%s: refused: %v", c.what, c.err)
		case c.want != "" && (api.CodeOf(c.err) != api.CodeInvalidArgument || !strings.Contains(c.err.Error(), c.want)):
			t.Errorf("%s: %v, want invalid-argument with %q", c.what, c.err, c.want)
		}
	}
	if ttl, err := TTL(10); err != nil || ttl != MinTTL {
		t.Errorf("TTL(10ms) = %v, %v; want raised to %v", ttl, err, MinTTL)
	}
	if _, err := TTL(MaxTTL.Milliseconds() + 1); api.CodeOf(err) != api.CodeInvalidArgument {
		t.Errorf("TTL above the maximum: %v", err)
	}
	if d, err := Acquire("x", hex, 1<<62); err != nil || d != MaxLockDelay {
		t.Errorf("Acquire with a huge lock-delay = %v, %v; want lowered to %v", d, err, MaxLockDelay)
	}
	if w, err := Wait(1500); err != nil || w != 1500*time.Millisecond {
		t.Errorf("Wait(1500) = %v, %v", w, err)
	}
	if _, err := Wait(-1); api.CodeOf(err) != api.CodeInvalidArgument {
		t.Errorf("Wait(-1): %v", err)
	}
}
