package fence_test

import (
	"context"
	"errors"
	"testing"

	"github.com/leasehold/leasehold/fence"
)

// FuzzGuardCheck writes a fuzzed sequence of tokens (one byte each, so
// ties and regressions are frequent) to one key of the in-memory guard, in
// both modes, against a reference: a write is accepted iff the mode admits
// it over the last accepted token; a refusal is a *StaleTokenError and
// changes nothing; Last always reports the last accepted write.
func FuzzGuardCheck(f *testing.F) {
	f.Add([]byte{1, 2, 2, 1, 3, 0, 255, 254})
	f.Add([]byte{5, 5, 5})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, tokens []byte) {
		ctx := context.Background()
		for _, mode := range []fence.Mode{fence.Monotonic, fence.Strict} {
			g := fence.NewMemory(fence.WithMode(mode))
			var last uint64
			var value []byte
			for i, b := range tokens {
				tok := uint64(b)
				v := []byte{byte(i)}
				err := g.Write(ctx, "k", tok, v)
				switch {
				case tok == 0:
					if !errors.Is(err, fence.ErrInvalidToken) {
						t.Fatalf("%v: token 0 gave %v", mode, err)
					}
				case tok >= last && (mode == fence.Monotonic || tok > last):
					if err != nil {
						t.Fatalf("%v: token %d over %d refused: %v", mode, tok, last, err)
					}
					last, value = tok, v
				default:
					var stale *fence.StaleTokenError
					if !errors.As(err, &stale) || !errors.Is(err, fence.ErrStaleToken) {
						t.Fatalf("%v: token %d over %d gave %v, want a stale-token refusal", mode, tok, last, err)
					}
				}
				got, gv, err := g.Last(ctx, "k")
				if err != nil || got != last || string(gv) != string(value) {
					t.Fatalf("%v: Last = %d %v %v, want %d %v", mode, got, gv, err, last, value)
				}
			}
		}
	})
}
