package admission

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/clock"
)

// readTracker records whether a request body was read.
type readTracker struct {
	io.Reader
	read bool
}

func (r *readTracker) Read(p []byte) (int, error) {
	r.read = true
	return r.Reader.Read(p)
}

func (r *readTracker) Close() error { return nil }

// TestKeepAliveRefusedBeforeItsBody: a KeepAlive of a principal whose
// renewals are spent is refused before its message is read (decoding
// 10 000 lease ids costs more than the renewals would), and reaches no
// handler; another principal's KeepAlive is read and handled.
func TestKeepAliveRefusedBeforeItsBody(t *testing.T) {
	cfg := DefaultLimits()
	cfg.RenewRate, cfg.RenewBurst = 1, 10
	clk := clock.NewManual(clock.Real{}.Now())
	l, err := New(cfg, clk, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(WithPrincipal(context.Background(), "ip:10.0.0.7"), 10_000); err != nil {
		t.Fatalf("the first renewal, on a full bucket: %v", err)
	}
	handled := 0
	h := l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled++
		_, _ = io.Copy(io.Discard, r.Body)
	}), func(r *http.Request) string { return r.Header.Get("X-Test-Principal") })
	send := func(p string) (*httptest.ResponseRecorder, *readTracker) {
		body := &readTracker{Reader: strings.NewReader(`{"leaseIds":["a"]}`)}
		r := httptest.NewRequest(http.MethodPost, leaseholdv1connect.LeaseholdServiceKeepAliveProcedure, body)
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("X-Test-Principal", p)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w, body
	}

	w, body := send("ip:10.0.0.7")
	if w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), "renew-rate") {
		t.Errorf("spent principal: HTTP %d %q, want 429 naming renew-rate", w.Code, w.Body.String())
	}
	if body.read || handled != 0 {
		t.Errorf("spent principal: body read %v, handled %d times; want neither", body.read, handled)
	}
	w, body = send("ip:10.0.0.8")
	if w.Code != http.StatusOK || !body.read || handled != 1 {
		t.Errorf("another principal: HTTP %d, body read %v, handled %d; want 200, read, handled once", w.Code, body.read, handled)
	}
}
