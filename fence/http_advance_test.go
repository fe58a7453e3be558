package fence_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/fence"
)

// applyingHandler is seed 004's payment service that checks nothing: it applies every charge
// it gets (the last one wins), then fails as the X-Fail header asks — "502" answers 502 after
// applying, "panic" panics after applying.
type applyingHandler struct {
	mu      sync.Mutex // protects applied
	applied []string   // "token:body" in order
}

func (h *applyingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.applied = append(h.applied, r.Header.Get("Fencing-Token")+":"+r.Header.Get("X-Charge"))
	h.mu.Unlock()
	switch r.Header.Get("X-Fail") {
	case "502":
		http.Error(w, "applied, then the answer broke", http.StatusBadGateway)
	case "panic":
		panic("applied, then crashed")
	case "400":
		http.Error(w, "refused before applying", http.StatusBadRequest)
	}
}

func (h *applyingHandler) log() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.applied)
}

// serveRecovering runs h like net/http does for a panicking handler: the panic is contained.
func serveRecovering(h http.Handler, w http.ResponseWriter, r *http.Request) (panicked bool) {
	defer func() {
		if recover() != nil {
			panicked = true
		}
	}()
	h.ServeHTTP(w, r)
	return false
}

// TestMiddlewareNeverBehindAnEffect is seed 004 with an upstream that applied B's charge and
// then failed: A's late charge with the older token must be refused and never reach the
// handler, in both modes and under both record policies (RecordUnless4xx still records a
// 5xx and a panic, whose outcome is unknown).
func TestMiddlewareNeverBehindAnEffect(t *testing.T) {
	for _, mode := range []fence.Mode{fence.Monotonic, fence.Strict} {
		for _, policy := range []fence.RecordPolicy{fence.RecordBefore, fence.RecordUnless4xx} {
			for _, fail := range []string{"502", "panic"} {
				t.Run(fmt.Sprintf("%v/%v/%s", mode, policy, fail), func(t *testing.T) {
					up := &applyingHandler{}
					a := fence.NewAdmitter(fence.NewMemoryTokenStore(), fence.WithMode(mode))
					h := fence.Middleware(a, fence.WithRecordPolicy(policy))(up)
					send := func(token, charge, fail string) *httptest.ResponseRecorder {
						r := httptest.NewRequest(http.MethodPost, "/charge", strings.NewReader(charge))
						r.Header.Set("Fencing-Key", "payments:stream-1")
						r.Header.Set("Fencing-Token", token)
						r.Header.Set("X-Charge", charge)
						if fail != "" {
							r.Header.Set("X-Fail", fail)
						}
						w := httptest.NewRecorder()
						serveRecovering(h, w, r)
						return w
					}
					if w := send("17", "A-1", ""); w.Code != 200 {
						t.Fatalf("A(17) first charge: %d %s", w.Code, w.Body)
					}
					send("18", "B-1", fail)
					w := send("17", "A-late", "")
					if w.Code != http.StatusConflict || decodeError(t, w).Code != "stale-token" {
						t.Fatalf("A(17) late charge: %d %s, want 409 stale-token", w.Code, w.Body)
					}
					if got, want := up.log(), []string{"17:A-1", "18:B-1"}; !slices.Equal(got, want) {
						t.Fatalf("upstream applied %v, want %v", got, want)
					}
					if tok, _ := a.LastToken(context.Background(), "payments:stream-1"); tok != 18 {
						t.Fatalf("last token %d, want 18", tok)
					}
				})
			}
		}
	}
}

// TestMiddlewareStrictOneEffectPerGeneration: in Strict mode a retry of a failed request with
// the same token is refused by default (the first attempt may have applied its effect); with
// RecordUnless4xx a definite 4xx refusal does not use up the generation.
func TestMiddlewareStrictOneEffectPerGeneration(t *testing.T) {
	tests := []struct {
		policy    fence.RecordPolicy
		firstFail string
		retry     int
	}{
		{fence.RecordBefore, "502", http.StatusConflict},
		{fence.RecordBefore, "400", http.StatusConflict},
		{fence.RecordUnless4xx, "502", http.StatusConflict},
		{fence.RecordUnless4xx, "400", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.policy.String()+"/"+tt.firstFail, func(t *testing.T) {
			up := &applyingHandler{}
			h := fence.Middleware(fence.NewAdmitter(fence.NewMemoryTokenStore(), fence.WithMode(fence.Strict)),
				fence.WithRecordPolicy(tt.policy))(up)
			first := req{headers: hdr("Fencing-Key", "k", "Fencing-Token", "5", "X-Fail", tt.firstFail)}.do(h)
			if first.Code < 400 {
				t.Fatalf("first attempt: %d", first.Code)
			}
			if w := (req{headers: hdr("Fencing-Key", "k", "Fencing-Token", "5")}).do(h); w.Code != tt.retry {
				t.Fatalf("retry with the same token: %d %s, want %d", w.Code, w.Body, tt.retry)
			}
		})
	}
}
