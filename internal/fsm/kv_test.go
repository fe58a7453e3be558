package fsm

import (
	"errors"
	"math"
	"slices"
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

func TestKVPut(t *testing.T) {
	// A holds x with token 1, B holds y with token 2; k was written with 2.
	written := append(sessions("A", "B"), acquire("x", "A"), acquire("y", "B"), kvPut("k", "v2", 2))
	stale := func(token, last uint64, strict bool) func(t *testing.T, r *rig, res Result) {
		return func(t *testing.T, r *rig, res Result) {
			var se *StaleTokenError
			if !errors.As(res.Err, &se) || se.Key != "k" || se.Token != token || se.LastToken != last || se.Strict != strict {
				t.Fatalf("Err = %#v, want *StaleTokenError{k, %d, %d, %v}", res.Err, token, last, strict)
			}
			wantKV(t, r, "k", "v2", 2)
		}
	}
	runCases(t, []applyCase{
		{
			name:  "first write with an issued token",
			setup: append(sessions("A"), acquire("x", "A")),
			cmd:   kvPut("k", "v1", 1),
			check: func(t *testing.T, r *rig, res Result) {
				wantKV(t, r, "k", "v1", 1)
				if string(res.KV.GetValue()) != "v1" || res.KV.GetToken() != 1 {
					t.Fatalf("Result.KV %v", res.KV)
				}
			},
		},
		{
			name:  "equal token accepted by default",
			setup: written,
			cmd:   kvPut("k", "again", 2),
			check: func(t *testing.T, r *rig, res Result) { wantKV(t, r, "k", "again", 2) },
		},
		{
			name:  "higher token accepted in strict mode",
			setup: append(slices.Clone(written), acquire("z", "A")),
			cmd:   kvPutStrict("k", "v3", 3),
			check: func(t *testing.T, r *rig, res Result) { wantKV(t, r, "k", "v3", 3) },
		},
		{
			name:  "keys are fenced independently",
			setup: written,
			cmd:   kvPut("other", "v1", 1),
			check: func(t *testing.T, r *rig, res Result) {
				wantKV(t, r, "other", "v1", 1)
				wantKV(t, r, "k", "v2", 2)
			},
		},
		{name: "equal token rejected in strict mode", setup: written, cmd: kvPutStrict("k", "v", 2), wantErr: ErrStaleToken, check: stale(2, 2, true)},
		{name: "lower token rejected", setup: written, cmd: kvPut("k", "v1", 1), wantErr: ErrStaleToken, check: stale(1, 2, false)},
		{name: "lower token rejected in strict mode", setup: written, cmd: kvPutStrict("k", "v1", 1), wantErr: ErrStaleToken, check: stale(1, 2, true)},
		{name: "token 0", setup: written, cmd: kvPut("k", "v", 0), wantErr: ErrInvalidToken},
		{name: "token 0 on a new key", setup: written, cmd: kvPut("new", "v", 0), wantErr: ErrInvalidToken},
		{name: "token never issued", setup: written, cmd: kvPut("k", "v", 3), wantErr: ErrInvalidToken},
		{name: "token never issued on a new key", setup: written, cmd: kvPut("new", "v", 3), wantErr: ErrInvalidToken},
		{name: "no token issued yet", setup: nil, cmd: kvPut("k", "v", 1), wantErr: ErrInvalidToken},
		{name: "max token", setup: written, cmd: kvPut("k", "v", math.MaxUint64), wantErr: ErrInvalidToken},
	})
}

func TestKVPutCopiesValue(t *testing.T) {
	r := newRig(t, DefaultLimits())
	r.must(append(sessions("A"), acquire("x", "A"))...)
	cmd := kvPut("k", "v1", 1)
	r.must(cmd)
	cmd.GetKvPut().Value[0] = 'X'
	wantKV(t, r, "k", "v1", 1)
}
