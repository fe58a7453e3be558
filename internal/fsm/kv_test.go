package fsm

import (
	"errors"
	"testing"
)

func TestKVDelete(t *testing.T) {
	runCases(t, []applyCase{
		{
			name:  "delete with the last token leaves a tombstone",
			setup: append(sessions("A"), acquire("x", "A"), kvPut("k", "v", 1)),
			cmd:   kvDelete("k", 1),
			check: func(t *testing.T, r *rig, res Result) {
				e := r.m.KV("k")
				if e == nil || !e.GetDeleted() || len(e.GetValue()) != 0 || e.GetToken() != 1 {
					t.Fatalf("KV after delete = %v, want a tombstone at token 1", e)
				}
				if res.KV == nil || !res.KV.GetDeleted() {
					t.Fatalf("Result.KV = %v", res.KV)
				}
			},
		},
		{
			name:    "stale delete is refused",
			setup:   append(sessions("A", "B"), acquire("x", "A"), acquire("y", "B"), kvPut("k", "v", 2)),
			cmd:     kvDelete("k", 1),
			wantErr: ErrStaleToken,
		},
		{
			name:    "strict delete with the last token is refused",
			setup:   append(sessions("A"), acquire("x", "A"), kvPut("k", "v", 1)),
			cmd:     kvDeleteStrict("k", 1),
			wantErr: ErrStaleToken,
		},
		{
			name:    "delete of a key never written",
			setup:   append(sessions("A"), acquire("x", "A")),
			cmd:     kvDelete("k", 1),
			wantErr: ErrKeyNotFound,
		},
		{
			name:    "delete with a token never issued",
			setup:   append(sessions("A"), acquire("x", "A"), kvPut("k", "v", 1)),
			cmd:     kvDelete("k", 2),
			wantErr: ErrInvalidToken,
		},
		{
			name:    "delete with token 0",
			setup:   append(sessions("A"), acquire("x", "A"), kvPut("k", "v", 1)),
			cmd:     kvDelete("k", 0),
			wantErr: ErrInvalidToken,
		},
	})
}

// TestKVDeleteKeepsTheFence: after a delete with token t, a write with an
// older token is still refused (the tombstone keeps the fence), a write
// with t or newer brings the key back, and the tombstone survives a
// snapshot and counts as a key.
func TestKVDeleteKeepsTheFence(t *testing.T) {
	limits := DefaultLimits()
	limits.MaxKVKeys = 1
	r := newRig(t, limits)
	r.must(sessions("A", "B")...)
	r.must(acquire("x", "A"), kvPut("k", "v1", 1), release("x", "A", 1), acquire("x", "B"))
	r.must(kvDelete("k", 2))
	restored := &rig{t: t, m: roundTrip(t, r.m), tokens: r.tokens}
	for _, rr := range []*rig{r, restored} {
		var stale *StaleTokenError
		if res := rr.apply(kvPut("k", "late", 1)); !errors.As(res.Err, &stale) || stale.LastToken != 2 {
			t.Fatalf("write with an older token after delete: %v", res.Err)
		}
		if res := rr.apply(kvPut("other", "v", 2)); !errors.Is(res.Err, ErrTooManyKeys) {
			t.Fatalf("the tombstone does not count as a key: %v", res.Err)
		}
		rr.must(kvPut("k", "v2", 2))
		wantKV(t, rr, "k", "v2", 2)
	}
}
