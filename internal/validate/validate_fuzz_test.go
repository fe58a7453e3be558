package validate

import (
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/leasehold/leasehold/api"
)

// FuzzValidate feeds arbitrary request fields to the checks.
// Each either accepts, and then what it accepted is within the documented
// limits, or refuses with a typed invalid-argument error; none panics.
func FuzzValidate(f *testing.F) {
	f.Add("report:417:rebuild", "worker-A", "0123456789abcdef0123456789abcdef", int64(5000), int64(0), int64(0), uint64(1))
	f.Add("", "", "", int64(0), int64(-1), int64(-1), uint64(0))
	f.Add("a b", "é\x00", "0123456789ABCDEF0123456789ABCDEF", int64(1)<<62, int64(1)<<62, int64(1)<<62, uint64(1)<<63)
	f.Fuzz(func(t *testing.T, name, owner, lease string, ttlMs, delayMs, waitMs int64, token uint64) {
		refused := func(what string, err error) bool {
			if err == nil {
				return false
			}
			var ae *api.Error
			if !errors.As(err, &ae) || api.CodeOf(err) != api.CodeInvalidArgument {
				t.Fatalf("%s: refusal %v is not an invalid-argument api error", what, err)
			}
			return true
		}
		for what, check := range map[string]func(string) error{"name": Name, "key": Key, "prefix": Prefix} {
			if refused(what, check(name)) {
				continue
			}
			if len(name) > MaxNameLen || (name == "" && what != "prefix") {
				t.Fatalf("%s %q accepted", what, name)
			}
			for i := range len(name) {
				if !nameChar(name[i]) {
					t.Fatalf("%s %q accepted with byte %q", what, name, name[i])
				}
			}
		}
		if !refused("owner", Owner(owner)) && (len(owner) > MaxOwnerLen || !utf8.ValidString(owner)) {
			t.Fatalf("owner %q accepted", owner)
		}
		if !refused("lease", LeaseID(lease)) && len(lease) != LeaseIDLen {
			t.Fatalf("lease id %q accepted", lease)
		}
		if ttl, err := TTL(ttlMs); !refused("ttl", err) && (ttl < MinTTL || ttl > MaxTTL) {
			t.Fatalf("ttl %dms granted as %v, outside [%v, %v]", ttlMs, ttl, MinTTL, MaxTTL)
		}
		if d, err := LockDelay(delayMs); !refused("lock-delay", err) && (d < 0 || d > MaxLockDelay) {
			t.Fatalf("lock-delay %dms accepted as %v", delayMs, d)
		}
		if w, err := Wait(waitMs); !refused("wait", err) && (w < 0 || w > MaxWait) {
			t.Fatalf("wait %dms accepted as %v", waitMs, w)
		}
		if !refused("token", Token(token)) && token == 0 {
			t.Fatal("token 0 accepted")
		}
	})
}
