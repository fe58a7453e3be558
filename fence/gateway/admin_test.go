package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fence/gateway"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// TestGatewayMaxKeys: beyond MaxKeys a request for a new key gets 507 resource-exhausted
// and never reaches the upstream; known keys keep working.
func TestGatewayMaxKeys(t *testing.T) {
	u := newUpstream(t)
	cfg := config(t, u, "")
	cfg.MaxKeys = 2
	tg := startGateway(t, cfg)
	for _, k := range []string{"a", "b"} {
		if r := charge(t, tg, k, "3"); r.status != 200 {
			t.Fatalf("key %s: %d %s", k, r.status, r.body)
		}
	}
	seen := u.count()
	if r := charge(t, tg, "c", "3"); r.status != http.StatusInsufficientStorage || r.err.Code != "resource-exhausted" {
		t.Fatalf("third key: %d %+v, want 507 resource-exhausted", r.status, r.err)
	}
	if u.count() != seen {
		t.Fatal("a refused new key reached the upstream")
	}
	if r := charge(t, tg, "a", "4"); r.status != 200 {
		t.Fatalf("known key when full: %d %s", r.status, r.body)
	}
}

// TestGatewayAdmin: the admin endpoints answer on their own listener, are never forwarded,
// drop-idle needs the admin token (403 permission-denied without it or with another) and
// refuses an age below MinDropIdle.
func TestGatewayAdmin(t *testing.T) {
	u := newUpstream(t)
	cfg := config(t, u, "")
	const adminTok = "0123456789abcdef0123456789abcdef"
	cfg.AdminToken = adminTok
	ports := servertest.FreePorts(t, 2)
	cfg.Listen, cfg.AdminListen = fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.ListenAndServe(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ListenAndServe = %v", err)
		}
	}()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	do := func(method, url string, hdr ...string) (int, string) {
		t.Helper()
		r, _ := http.NewRequest(method, url, strings.NewReader("v"))
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		var resp *http.Response
		eventuallyOK(t, func() error { resp, err = client.Do(r); return err })
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := do("POST", "http://"+cfg.Listen+"/charge", "Fencing-Key", "k", "Fencing-Token", "2"); code != 200 {
		t.Fatalf("charge: %d", code)
	}
	seen := u.count()
	if code, body := do("GET", "http://"+cfg.AdminListen+"/healthz"); code != 200 || body != "ok keys=1 max_keys=1000000\n" {
		t.Fatalf("healthz: %d %q", code, body)
	}
	code, body := do("GET", "http://"+cfg.AdminListen+"/metrics")
	if code != 200 || !strings.Contains(body, "leasehold_gateway_keys 1\n") || !strings.Contains(body, `leasehold_gateway_responses_total{code="200"} 1`) {
		t.Fatalf("metrics: %d\n%s", code, body)
	}
	for _, hdr := range [][]string{nil, {"Authorization", "Bearer " + adminTok[1:] + "x"}, {"Authorization", adminTok}} {
		if code, body := do("POST", "http://"+cfg.AdminListen+"/admin/drop-idle?older-than=24h", hdr...); code != 403 || !strings.Contains(body, "permission-denied") {
			t.Fatalf("drop-idle with %q: %d %s, want 403 permission-denied", hdr, code, body)
		}
	}
	bearer := []string{"Authorization", "Bearer " + adminTok}
	if code, body := do("POST", "http://"+cfg.AdminListen+"/admin/drop-idle?older-than=1m", bearer...); code != 400 || !strings.Contains(body, "invalid-argument") {
		t.Fatalf("drop-idle 1m: %d %s", code, body)
	}
	code, body = do("POST", "http://"+cfg.AdminListen+"/admin/drop-idle?older-than=24h", bearer...)
	var out struct{ Dropped, Keys int }
	if code != 200 || json.Unmarshal([]byte(body), &out) != nil || out.Dropped != 0 || out.Keys != 1 {
		t.Fatalf("drop-idle 24h: %d %s", code, body)
	}
	if u.count() != seen {
		t.Fatal("an admin request reached the upstream")
	}
}

// TestGatewayAdminTokenOff: without an admin token the admin actions are refused, and a
// short token is not a valid configuration.
func TestGatewayAdminTokenOff(t *testing.T) {
	u := newUpstream(t)
	cfg := config(t, u, "")
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	rec := httptest.NewRecorder()
	g.AdminHandler().ServeHTTP(rec, httptest.NewRequest("POST", "/admin/drop-idle?older-than=24h", nil))
	if rec.Code != 403 || !strings.Contains(rec.Body.String(), "permission-denied") {
		t.Fatalf("drop-idle without an admin token configured: %d %s, want 403 permission-denied", rec.Code, rec.Body)
	}
	cfg.AdminToken = "short"
	if err := cfg.Validate(); !errors.Is(err, gateway.ErrInvalidConfig) {
		t.Fatalf("a 5-byte admin token: Validate = %v, want ErrInvalidConfig", err)
	}
}

// eventuallyOK retries f (a connection to a server that may not listen yet) for up to 5 s.
func eventuallyOK(t *testing.T, f func() error) {
	t.Helper()
	var err error
	for range 500 {
		if err = f(); err == nil {
			return
		}
		<-time.After(10 * time.Millisecond)
	}
	t.Fatal(err)
}
