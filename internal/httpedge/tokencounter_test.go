package httpedge_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/leasehold/leasehold/internal/harness/servertest"
	"github.com/leasehold/leasehold/internal/httpedge"
)

// TestTokenCounter: the endpoint answers the newest token issued, which moves with each grant.
func TestTokenCounter(t *testing.T) {
	t.Parallel()
	c := servertest.Start(t, servertest.Options{})
	get := func() uint64 {
		t.Helper()
		resp, err := c.HTTP.Get(c.URL + httpedge.TokenCounterPath)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Token uint64 `json:"token"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", httpedge.TokenCounterPath, resp.StatusCode, err)
		}
		return body.Token
	}
	before := get()
	sess := servertest.NewSession(t, c.Client, 5000, "counter")
	h := servertest.Acquire(t, c.Client, "counter:a", sess.GetLeaseId())
	if h.GetToken() <= before {
		t.Fatalf("grant token %d not above the counter %d before it", h.GetToken(), before)
	}
	if got := get(); got != h.GetToken() {
		t.Fatalf("counter %d after a grant of token %d", got, h.GetToken())
	}
	resp, err := c.HTTP.Post(c.URL+httpedge.TokenCounterPath, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d, want 405", resp.StatusCode)
	}
}
