package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/gateway"
)

// counterServer is leasehold's GET /v1/token-counter with a settable counter.
type counterServer struct {
	srv     *httptest.Server
	token   atomic.Uint64
	fetches atomic.Int64
	broken  atomic.Bool
}

func newCounterServer(t *testing.T) *counterServer {
	c := &counterServer{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/token-counter" {
			http.NotFound(w, r)
			return
		}
		c.fetches.Add(1)
		if c.broken.Load() {
			http.Error(w, `{"error":{"code":"unavailable","message":"no leader"}}`, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, `{"token":%d}`+"\n", c.token.Load())
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// TestGatewayTokenCounter: without signatures, a token the cluster never issued is refused
// before it is recorded; issued tokens pass, and only a token above the cache costs a fetch.
func TestGatewayTokenCounter(t *testing.T) {
	u := newUpstream(t)
	cs := newCounterServer(t)
	cs.token.Store(10)
	cfg := config(t, u, "")
	cfg.TokenCounter = &gateway.TokenCounterConfig{Endpoint: cs.srv.URL, MinRefresh: time.Nanosecond}
	tg := startGateway(t, cfg)
	const key = "payments:stream-1"

	r := charge(t, tg, key, "18446744073709551615")
	if r.status != http.StatusForbidden || r.err.Code != fence.CodePermissionDenied {
		t.Fatalf("huge token: %d %+v, want 403 permission-denied", r.status, r.err)
	}
	if last, _ := tg.g.LastToken(t.Context(), key); last != 0 || u.count() != 0 {
		t.Fatalf("a refused token was recorded (%d) or forwarded (%d)", last, u.count())
	}
	if r := charge(t, tg, key, "10"); r.status != http.StatusOK {
		t.Fatalf("issued token 10: %d %s", r.status, r.body)
	}
	fetches := cs.fetches.Load()
	if r := charge(t, tg, key, "9"); r.status != http.StatusConflict {
		t.Fatalf("stale token 9: %d", r.status)
	}
	if cs.fetches.Load() != fetches {
		t.Fatal("a token below the cached counter fetched it again")
	}
	cs.token.Store(11) // a new grant
	if r := charge(t, tg, key, "11"); r.status != http.StatusOK {
		t.Fatalf("newly issued token 11: %d %s", r.status, r.body)
	}
	cs.broken.Store(true)
	r = charge(t, tg, key, "12")
	if r.status != http.StatusServiceUnavailable || r.err.Code != fence.CodeUnavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("counter unavailable: %d %+v, want 503 unavailable", r.status, r.err)
	}
	if last, _ := tg.g.LastToken(t.Context(), key); last != 11 {
		t.Fatalf("last token %d, want 11", last)
	}
	// Malformed tokens still get the usual 400, without a fetch.
	fetches = cs.fetches.Load()
	if r := charge(t, tg, key, "x"); r.status != http.StatusBadRequest || cs.fetches.Load() != fetches {
		t.Fatalf("malformed token: %d, fetches %d→%d", r.status, fetches, cs.fetches.Load())
	}
}

func TestGatewayTokenCounterConfig(t *testing.T) {
	u := newUpstream(t)
	for _, tc := range []*gateway.TokenCounterConfig{{}, {Endpoint: "ftp://x"}, {Endpoint: "http://x", MinRefresh: -1}} {
		cfg := config(t, u, "")
		cfg.TokenCounter = tc
		if err := cfg.Validate(); err == nil {
			t.Errorf("%+v: accepted", tc)
		}
	}
}
