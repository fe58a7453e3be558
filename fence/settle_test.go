package fence_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fence"
)

// TestMiddlewareSettles: with WithSettle, nothing is admitted for the settle time after the
// middleware is built, and a key whose handler marked its outcome unknown is refused (503,
// Retry-After, nothing recorded) for the settle time after that handler returned; other keys
// are not.
func TestMiddlewareSettles(t *testing.T) {
	const settle = 150 * time.Millisecond
	a := fence.NewAdmitter(fence.NewMemoryTokenStore())
	built := time.Now()
	h := fence.Middleware(a, fence.WithSettle(settle))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Lost") != "" {
			fence.MarkUnsettled(r.Context())
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	send := func(key string, token uint64, lost bool) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set(fence.DefaultKeyHeader, key)
		r.Header.Set(fence.DefaultTokenHeader, strconv.FormatUint(token, 10))
		if lost {
			r.Header.Set("X-Lost", "1")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	// admitted retries a refused request for at most 5 s and returns when it was admitted.
	admitted := func(key string, token uint64) time.Time {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; {
			w := send(key, token, false)
			if w.Code == http.StatusOK {
				return time.Now()
			}
			if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" || time.Now().After(deadline) {
				t.Fatalf("%s token %d: %d %s (Retry-After %q)", key, token, w.Code, w.Body, w.Header().Get("Retry-After"))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if w := send("a", 1, false); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("right after start: %d, want 503", w.Code)
	}
	if at := admitted("a", 1); at.Sub(built) < settle {
		t.Fatalf("admitted %v after start, within the settle time", at.Sub(built))
	}
	if w := send("a", 2, true); w.Code != http.StatusBadGateway {
		t.Fatalf("the lost exchange: %d", w.Code)
	}
	lost := time.Now()
	if w := send("a", 3, false); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("a newer token after a lost exchange: %d, want 503", w.Code)
	}
	if last, _ := a.LastToken(t.Context(), "a"); last != 2 {
		t.Fatalf("last token %d after a refusal, want 2", last)
	}
	if w := send("b", 1, false); w.Code != http.StatusOK {
		t.Fatalf("another key: %d, want 200", w.Code)
	}
	if at := admitted("a", 3); at.Sub(lost) < settle {
		t.Fatalf("admitted %v after the lost exchange, within the settle time", at.Sub(lost))
	}
}
