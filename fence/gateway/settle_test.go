package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/gateway"
)

// slowUpstream applies a write (records its token and key) at once, or, with X-Slow, after
// working 400 ms whether or not the gateway is still waiting: as a database call goes on when
// the HTTP request that made it is abandoned.
type slowUpstream struct {
	srv *httptest.Server

	mu      sync.Mutex // protects applied
	applied []string
}

func newSlowUpstream(t *testing.T) *slowUpstream {
	u := &slowUpstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Slow") != "" {
			time.Sleep(400 * time.Millisecond) // the upstream's own work, not a wait
		}
		u.mu.Lock()
		u.applied = append(u.applied, r.Header.Get("Fencing-Token")+":"+r.Header.Get("Fencing-Key"))
		u.mu.Unlock()
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *slowUpstream) order() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.applied...)
}

// TestGatewaySettles: after an exchange that timed out, no newer token is forwarded for the
// key until the older request can no longer reach the upstream, so the older write never lands
// after the newer one; and a gateway that just started forwards nothing for its settle time.
func TestGatewaySettles(t *testing.T) {
	u := newSlowUpstream(t)
	cfg := gateway.DefaultConfig()
	cfg.Upstream = u.srv.URL
	cfg.DataFile = filepath.Join(t.TempDir(), "gateway.db")
	cfg.UpstreamTimeout = 200 * time.Millisecond
	cfg.Settle = 500 * time.Millisecond // above the upstream's 400 ms of work
	started := time.Now()
	tg := startGateway(t, cfg)
	write := func(key string, token uint64, slow bool) response {
		h := []string{"Fencing-Key", key, "Fencing-Token", fmt.Sprint(token)}
		if slow {
			h = append(h, "X-Slow", "1")
		}
		return tg.send(t, http.MethodPost, "/w", h...)
	}
	// writeUntilAdmitted retries a write refused as unsettled, as a client honouring
	// Retry-After does, for at most 5 s.
	writeUntilAdmitted := func(key string, token uint64) (response, time.Time) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; {
			r := write(key, token, false)
			if r.status != http.StatusServiceUnavailable {
				return r, time.Now()
			}
			if r.header.Get("Retry-After") == "" || r.err.Code != fence.CodeUnavailable {
				t.Fatalf("unsettled refusal without Retry-After: %+v %v", r.err, r.header)
			}
			if time.Now().After(deadline) {
				t.Fatalf("write of %s still refused after 5 s", key)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	if r := write("warm-up", 1, false); r.status != http.StatusServiceUnavailable {
		t.Fatalf("a write right after start: %d, want 503 for the settle time", r.status)
	}
	if r, at := writeUntilAdmitted("warm-up", 1); r.status != http.StatusOK || at.Sub(started) < cfg.Settle {
		t.Fatalf("first write admitted %v after start with %d, want 200 after the settle time", at.Sub(started), r.status)
	}

	if r := write("balance", 17, true); r.status != http.StatusBadGateway {
		t.Fatalf("the slow write: %d, want 502 after the upstream timeout", r.status)
	}
	ended := time.Now()
	if r := write("balance", 18, false); r.status != http.StatusServiceUnavailable {
		t.Fatalf("a newer token right after the timeout: %d %s, want 503", r.status, r.body)
	}
	r, at := writeUntilAdmitted("balance", 18)
	if r.status != http.StatusOK || at.Sub(ended) < cfg.Settle {
		t.Fatalf("the newer token admitted %v after the timeout with %d, want 200 after the settle time", at.Sub(ended), r.status)
	}
	if r := write("balance", 17, false); r.status != http.StatusConflict {
		t.Fatalf("the older token again: %d, want 409", r.status)
	}
	if got, want := u.order(), []string{"1:warm-up", "17:balance", "18:balance"}; !slices.Equal(got, want) {
		t.Fatalf("upstream applied %q, want %q: the older write after the newer", got, want)
	}
}
