package gateway_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fence/gateway"
)

// failingUpstream applies every charge it gets (it checks nothing), then fails as the X-Fail
// header asks: "502" answers 502, "hang" answers only after the gateway gave up on it,
// "drop" closes the connection without an answer, "400" refuses without applying.
type failingUpstream struct {
	srv     *httptest.Server
	release chan struct{} // closed at cleanup: frees hung requests

	mu      sync.Mutex // protects applied
	applied []string   // "token:body" in order
}

func newFailingUpstream(t *testing.T) *failingUpstream {
	u := &failingUpstream{release: make(chan struct{})}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("X-Fail") == "400" {
			http.Error(w, "refused", http.StatusBadRequest)
			return
		}
		u.mu.Lock()
		u.applied = append(u.applied, r.Header.Get("Fencing-Token")+":"+string(body))
		u.mu.Unlock()
		switch r.Header.Get("X-Fail") {
		case "502":
			http.Error(w, "applied, then broke", http.StatusBadGateway)
		case "hang":
			select {
			case <-u.release:
			case <-r.Context().Done():
			}
		case "drop":
			panic(http.ErrAbortHandler)
		}
	}))
	t.Cleanup(func() {
		close(u.release)
		u.srv.Close()
	})
	return u
}

func (u *failingUpstream) log() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.applied)
}

func (u *failingUpstream) charge(t *testing.T, tg *testGateway, token, body, fail string) int {
	t.Helper()
	r, err := http.NewRequest(http.MethodPost, tg.srv.URL+"/charge", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Fencing-Key", "payments:stream-1")
	r.Header.Set("Fencing-Token", token)
	if fail != "" {
		r.Header.Set("X-Fail", fail)
	}
	resp, err := tg.srv.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestGatewayNeverBehindAnEffect is seed 004 with an upstream that applied leader B's charge
// and then answered 502, timed out, or dropped the connection: leader A's late charge with
// token 17 must be refused with 409 and must never reach the upstream — under both record
// policies, and after a gateway restart.
func TestGatewayNeverBehindAnEffect(t *testing.T) {
	for _, policy := range []string{gateway.RecordBefore, gateway.RecordUnless4xx} {
		for _, fail := range []string{"502", "hang", "drop"} {
			t.Run(policy+"/"+fail, func(t *testing.T) {
				u := newFailingUpstream(t)
				cfg := gateway.DefaultConfig()
				cfg.Upstream = u.srv.URL
				cfg.DataFile = t.TempDir() + "/gateway.db"
				cfg.Record = policy
				cfg.UpstreamTimeout = 200 * time.Millisecond
				tg := startGateway(t, cfg)

				if code := u.charge(t, tg, "17", "A-1", ""); code != 200 {
					t.Fatalf("A(17) first charge: %d", code)
				}
				if code := u.charge(t, tg, "18", "B-1", fail); code < 500 {
					t.Fatalf("B(18) charge that fails upstream: %d, want 5xx", code)
				}
				if code := u.charge(t, tg, "17", "A-late", ""); code != http.StatusConflict {
					t.Fatalf("A(17) late charge: %d, want 409", code)
				}
				if got, want := u.log(), []string{"17:A-1", "18:B-1"}; !slices.Equal(got, want) {
					t.Fatalf("upstream applied %v, want %v", got, want)
				}

				tg.stop()
				tg2 := startGateway(t, cfg)
				if tok, err := tg2.g.LastToken(context.Background(), "payments:stream-1"); err != nil || tok != 18 {
					t.Fatalf("after restart LastToken = %d, %v; want 18", tok, err)
				}
			})
		}
	}
}

// TestGatewayRecordPolicies: a definite 4xx refusal uses up the token's generation in strict
// mode under the default policy, and does not under RecordUnless4xx.
func TestGatewayRecordPolicies(t *testing.T) {
	for _, tt := range []struct {
		policy string
		retry  int
	}{{gateway.RecordBefore, http.StatusConflict}, {gateway.RecordUnless4xx, http.StatusOK}} {
		t.Run(tt.policy, func(t *testing.T) {
			u := newFailingUpstream(t)
			cfg := gateway.DefaultConfig()
			cfg.Upstream = u.srv.URL
			cfg.DataFile = t.TempDir() + "/gateway.db"
			cfg.Record = tt.policy
			cfg.Strict = true
			tg := startGateway(t, cfg)
			if code := u.charge(t, tg, "5", "first", "400"); code != 400 {
				t.Fatalf("refused charge: %d", code)
			}
			if code := u.charge(t, tg, "5", "retry", ""); code != tt.retry {
				t.Fatalf("retry with the same token: %d, want %d", code, tt.retry)
			}
		})
	}
}
