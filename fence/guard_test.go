package fence_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fence"
)

// subject is one guard under the conformance suite, plus a way to run a fenced effect that
// records, INSIDE the guard's atomic step, the order in which tokens were accepted.
type subject struct {
	guard fence.Guard
	// doLogged writes value to the effect's own storage for key and appends token to key's
	// accept log, both inside the fenced step; with fail it returns errEffect before writing.
	doLogged func(ctx context.Context, key string, token uint64, value []byte, fail bool) error
	// logged returns key's accept log and the value the effect stored for key.
	logged func(ctx context.Context, key string) ([]uint64, []byte)
}

var errEffect = errors.New("effect failed")

// impl opens a fresh subject (its own table / key prefix) in a mode.
type impl struct {
	name string
	open func(t *testing.T, mode fence.Mode) *subject
}

func impls() []impl {
	return []impl{
		{"memory", openMemory},
		{"sqlite", openSQLite},
		{"postgres", openPostgres},
		{"redis", openRedis},
		{"admitter-memory", func(t *testing.T, mode fence.Mode) *subject {
			return openAdmitter(t, fence.NewMemoryTokenStore(), mode)
		}},
		{"admitter-bolt", func(t *testing.T, mode fence.Mode) *subject {
			return openAdmitter(t, openBolt(t, filepath.Join(t.TempDir(), "tokens.db")), mode)
		}},
	}
}

// admitGuard is a Guard made of an Admitter and a value map, so that the conformance suite
// also checks the Admitter (and its token stores) that Middleware and the gateway use.
type admitGuard struct {
	a *fence.Admitter

	mu     sync.Mutex // protects values
	values map[string][]byte
}

func (g *admitGuard) Write(ctx context.Context, key string, token uint64, value []byte) error {
	return g.a.Admit(ctx, key, token, func(context.Context) error {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.values[key] = bytes.Clone(value)
		return nil
	})
}

func (g *admitGuard) Last(ctx context.Context, key string) (uint64, []byte, error) {
	tok, err := g.a.LastToken(ctx, key)
	if err != nil {
		return 0, nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return tok, bytes.Clone(g.values[key]), nil
}

func openAdmitter(t *testing.T, store fence.TokenStore, mode fence.Mode) *subject {
	g := &admitGuard{a: fence.NewAdmitter(store, fence.WithMode(mode)), values: map[string][]byte{}}
	var mu sync.Mutex // protects log and data
	log := map[string][]uint64{}
	data := map[string][]byte{}
	return &subject{
		guard: g,
		doLogged: func(ctx context.Context, key string, token uint64, value []byte, fail bool) error {
			return g.a.Admit(ctx, key, token, func(context.Context) error {
				if fail {
					return errEffect
				}
				mu.Lock()
				defer mu.Unlock()
				log[key] = append(log[key], token)
				data[key] = bytes.Clone(value)
				return nil
			})
		},
		logged: func(_ context.Context, key string) ([]uint64, []byte) {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(log[key]), data[key]
		},
	}
}

func openMemory(t *testing.T, mode fence.Mode) *subject {
	g := fence.NewMemory(fence.WithMode(mode))
	var mu sync.Mutex // protects log and data
	log := map[string][]uint64{}
	data := map[string][]byte{}
	return &subject{
		guard: g,
		doLogged: func(ctx context.Context, key string, token uint64, value []byte, fail bool) error {
			return g.Do(ctx, key, token, func() error {
				if fail {
					return errEffect
				}
				mu.Lock()
				defer mu.Unlock()
				log[key] = append(log[key], token)
				data[key] = bytes.Clone(value)
				return nil
			})
		},
		logged: func(_ context.Context, key string) ([]uint64, []byte) {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(log[key]), data[key]
		},
	}
}

func forEachImpl(t *testing.T, fn func(t *testing.T, im impl)) {
	for _, im := range impls() {
		t.Run(im.name, func(t *testing.T) {
			t.Parallel()
			fn(t, im)
		})
	}
}

func mustStale(t *testing.T, err error, key string, token, last uint64) {
	t.Helper()
	if !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("token %d: err = %v, want ErrStaleToken", token, err)
	}
	var ste *fence.StaleTokenError
	if !errors.As(err, &ste) {
		t.Fatalf("token %d: err %T is not a *StaleTokenError", token, err)
	}
	want := fence.StaleTokenError{Key: key, Token: token, LastToken: last}
	if *ste != want {
		t.Fatalf("StaleTokenError = %+v, want %+v", *ste, want)
	}
}

func mustLast(t *testing.T, g fence.Guard, key string, token uint64, value string) {
	t.Helper()
	gotTok, gotVal, err := g.Last(context.Background(), key)
	if err != nil {
		t.Fatalf("Last(%q): %v", key, err)
	}
	if gotTok != token || string(gotVal) != value {
		t.Fatalf("Last(%q) = %d, %q; want %d, %q", key, gotTok, gotVal, token, value)
	}
}

// TestGuardSeedScenario is seed 000 at the resource: worker-B's write with token 2 is
// accepted, paused worker-A's late write with token 1 is refused and the value stays v2.
func TestGuardSeedScenario(t *testing.T) {
	forEachImpl(t, func(t *testing.T, im impl) {
		for _, mode := range []fence.Mode{fence.Monotonic, fence.Strict} {
			t.Run(mode.String(), func(t *testing.T) {
				ctx := context.Background()
				g := im.open(t, mode).guard
				const key = "report:417:rebuild"
				mustLast(t, g, key, 0, "")

				if err := g.Write(ctx, key, 1, []byte("v1")); err != nil {
					t.Fatalf("write token 1: %v", err)
				}
				if err := g.Write(ctx, key, 2, []byte("v2")); err != nil {
					t.Fatalf("write token 2: %v", err)
				}
				mustStale(t, g.Write(ctx, key, 1, []byte("old-v1")), key, 1, 2)
				mustLast(t, g, key, 2, "v2")

				// The same holder writing again with its token: allowed unless strict.
				err := g.Write(ctx, key, 2, []byte("v2-again"))
				if mode == fence.Strict {
					mustStale(t, err, key, 2, 2)
					mustLast(t, g, key, 2, "v2")
				} else {
					if err != nil {
						t.Fatalf("monotonic rewrite with equal token: %v", err)
					}
					mustLast(t, g, key, 2, "v2-again")
				}

				// Keys are independent.
				if err := g.Write(ctx, key+":other", 1, []byte("o1")); err != nil {
					t.Fatalf("other key: %v", err)
				}
				mustLast(t, g, key, 2, map[fence.Mode]string{fence.Monotonic: "v2-again", fence.Strict: "v2"}[mode])
			})
		}
	})
}

func TestGuardBadInput(t *testing.T) {
	forEachImpl(t, func(t *testing.T, im impl) {
		ctx := context.Background()
		s := im.open(t, fence.Monotonic)
		const key = "k"
		if err := s.guard.Write(ctx, key, 5, []byte("v5")); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name  string
			key   string
			token uint64
			want  error
		}{
			{"empty key", "", 9, fence.ErrInvalidKey},
			{"long key", strings.Repeat("x", fence.MaxKeyLen+1), 9, fence.ErrInvalidKey},
			{"bad utf8", "k\xff", 9, fence.ErrInvalidKey},
			{"nul", "k\x00", 9, fence.ErrInvalidKey},
			{"token 0", key, 0, fence.ErrInvalidToken},
		}
		for _, tt := range tests {
			if err := s.guard.Write(ctx, tt.key, tt.token, []byte("bad")); !errors.Is(err, tt.want) {
				t.Errorf("%s: Write = %v, want %v", tt.name, err, tt.want)
			}
			if err := s.doLogged(ctx, tt.key, tt.token, []byte("bad"), false); !errors.Is(err, tt.want) {
				t.Errorf("%s: Do = %v, want %v", tt.name, err, tt.want)
			}
			if !strings.HasPrefix(tt.want.Error(), "fence: ") {
				t.Errorf("%s: error %q lacks prefix", tt.name, tt.want)
			}
		}
		if _, _, err := s.guard.Last(ctx, ""); !errors.Is(err, fence.ErrInvalidKey) {
			t.Errorf("Last(\"\") = %v, want ErrInvalidKey", err)
		}
		mustLast(t, s.guard, key, 5, "v5")
		if lg, _ := s.logged(ctx, key); len(lg) != 0 {
			t.Errorf("log after invalid writes = %v, want empty", lg)
		}
		// A key of exactly MaxKeyLen bytes is fine.
		long := strings.Repeat("y", fence.MaxKeyLen)
		if err := s.guard.Write(ctx, long, 1, []byte("ok")); err != nil {
			t.Fatalf("key of MaxKeyLen bytes: %v", err)
		}
		mustLast(t, s.guard, long, 1, "ok")
	})
}

// TestGuardEffectFailure: a general-form effect that fails records no token.
func TestGuardEffectFailure(t *testing.T) {
	forEachImpl(t, func(t *testing.T, im impl) {
		ctx := context.Background()
		s := im.open(t, fence.Strict)
		const key = "payments:stream-1"
		if err := s.doLogged(ctx, key, 17, []byte("a"), false); err != nil {
			t.Fatal(err)
		}
		if err := s.doLogged(ctx, key, 18, []byte("b"), true); err == nil || !strings.Contains(err.Error(), "effect failed") {
			t.Fatalf("failing effect: err = %v", err)
		}
		mustLast(t, s.guard, key, 17, "")
		// Token 18 was not recorded, so in strict mode it can still be used.
		if err := s.doLogged(ctx, key, 18, []byte("c"), false); err != nil {
			t.Fatalf("retry with 18: %v", err)
		}
		lg, v := s.logged(ctx, key)
		if !slices.Equal(lg, []uint64{17, 18}) || string(v) != "c" {
			t.Fatalf("log %v value %q, want [17 18] \"c\"", lg, v)
		}
	})
}

// TestGuardConcurrent: many goroutines race shuffled tokens through one guard. Afterwards the
// stored value is the highest token's and the accept order, recorded inside the atomic step,
// never goes back.
func TestGuardConcurrent(t *testing.T) {
	forEachImpl(t, func(t *testing.T, im impl) {
		for _, mode := range []fence.Mode{fence.Monotonic, fence.Strict} {
			t.Run(mode.String(), func(t *testing.T) {
				runConcurrent(t, im.open(t, mode), mode)
			})
		}
	})
}

func runConcurrent(t *testing.T, s *subject, mode fence.Mode) {
	const (
		workers = 32
		tokens  = 200
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("shuffle seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	// A full shuffle accepts only the few running maxima (~ln 200); a shuffle within windows
	// of 8 keeps tokens racing their neighbours and accepts many, so the order check bites.
	orderings := map[string]func() []int{
		"shuffled": func() []int { return rng.Perm(tokens) },
		"windowed": func() []int {
			p := make([]int, tokens)
			for i := range p {
				p[i] = i
			}
			for w := 0; w < tokens; w += 8 {
				win := p[w:min(w+8, tokens)]
				rng.Shuffle(len(win), func(i, j int) { win[i], win[j] = win[j], win[i] })
			}
			return p
		},
	}
	for _, run := range []struct {
		viaWrite bool
		ordering string
	}{{false, "shuffled"}, {false, "windowed"}, {true, "shuffled"}, {true, "windowed"}} {
		viaWrite := run.viaWrite
		key := fmt.Sprintf("concurrent:write=%v:%s", viaWrite, run.ordering)
		order := orderings[run.ordering]()
		work := make(chan uint64, tokens)
		for _, i := range order {
			work <- uint64(i + 1)
		}
		close(work)

		type result struct {
			token uint64
			err   error
		}
		results := make(chan result, tokens)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for tok := range work {
					val := fmt.Appendf(nil, "v%d", tok)
					var err error
					if viaWrite {
						err = s.guard.Write(ctx, key, tok, val)
					} else {
						err = s.doLogged(ctx, key, tok, val, false)
					}
					results <- result{tok, err}
				}
			})
		}
		wg.Wait()
		close(results)

		accepted := map[uint64]bool{}
		var stale []*fence.StaleTokenError
		for r := range results {
			var ste *fence.StaleTokenError
			switch {
			case r.err == nil:
				accepted[r.token] = true
			case errors.As(r.err, &ste) && errors.Is(r.err, fence.ErrStaleToken):
				stale = append(stale, ste)
			default:
				t.Fatalf("token %d: unexpected error %v", r.token, r.err)
			}
		}
		if len(accepted)+len(stale) != tokens {
			t.Fatalf("%d accepted + %d stale != %d", len(accepted), len(stale), tokens)
		}
		if !accepted[tokens] {
			t.Fatalf("the highest token %d was refused", tokens)
		}
		for _, ste := range stale {
			if mode.Admits(ste.Token, ste.LastToken) {
				t.Errorf("token %d refused although last was %d", ste.Token, ste.LastToken)
			}
			if !accepted[ste.LastToken] {
				t.Errorf("token %d refused citing last token %d, which was never accepted", ste.Token, ste.LastToken)
			}
		}
		if viaWrite {
			mustLast(t, s.guard, key, tokens, fmt.Sprintf("v%d", tokens))
			continue
		}
		mustLast(t, s.guard, key, tokens, "") // the general form leaves the guard's value alone
		log, value := s.logged(ctx, key)
		if string(value) != fmt.Sprintf("v%d", tokens) {
			t.Errorf("effect value = %q, want v%d", value, tokens)
		}
		if len(log) != len(accepted) {
			t.Errorf("accept log has %d entries, %d writes were accepted", len(log), len(accepted))
		}
		for i, tok := range log {
			if !accepted[tok] {
				t.Errorf("log[%d] = %d was not reported accepted", i, tok)
			}
			if i > 0 && !mode.Admits(tok, log[i-1]) {
				t.Errorf("accept order %v: token %d accepted after %d", log[max(0, i-3):i+1], tok, log[i-1])
			}
		}
		t.Logf("%s: %d of %d accepted", key, len(accepted), tokens)
	}
}
