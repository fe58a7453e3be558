package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// Absurd durations over the JSON API never wrap: each is refused with
// invalid-argument or capped as documented (TTL at 1 h, lock-delay at
// 60 s), never turned negative or zero by overflow. A plain HTTP caller
// reads the leasehold code from the Leasehold-Code header.
func TestAbsurdDurationsJSON(t *testing.T) {
	t.Parallel()
	c := servertest.Start(t, servertest.Options{})
	post := func(method, body string) (int, http.Header, map[string]any) {
		t.Helper()
		resp, err := c.HTTP.Post(c.URL+"/leasehold.v1.LeaseholdService/"+method, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatalf("%s %s: body %s: %v", method, body, data, err)
		}
		return resp.StatusCode, resp.Header, out
	}
	absurd := []int64{1e13, 1 << 62, math.MaxInt64, -1, math.MinInt64}

	_, _, sess := post("CreateSession", `{"ttlMs":"60000"}`)
	lease, _ := sess["leaseId"].(string)
	if lease == "" {
		t.Fatalf("CreateSession: %v", sess)
	}
	for i, v := range absurd {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			wantCode := func(what string, status int, h http.Header, body map[string]any, want api.Code) {
				t.Helper()
				if status == http.StatusOK {
					t.Fatalf("%s(%d) succeeded: %v, want %s", what, v, body, want)
				}
				if got := h.Get("Leasehold-Code"); got != string(want) {
					t.Errorf("%s(%d): Leasehold-Code %q, want %q (body %v)", what, v, got, want, body)
				}
			}
			// ttl_ms: refused when ≤ 0 or above 1 h, never lowered silently.
			status, h, body := post("CreateSession", fmt.Sprintf(`{"ttlMs":"%d"}`, v))
			wantCode("CreateSession ttl", status, h, body, api.CodeInvalidArgument)
			// lock_delay_ms: refused when < 0, lowered to 60 s when above.
			for _, method := range []string{"Acquire", "TryAcquire"} {
				name := fmt.Sprintf("absurd-%s-%d", method, i)
				status, h, body = post(method, fmt.Sprintf(`{"name":%q,"leaseId":%q,"lockDelayMs":"%d"}`, name, lease, v))
				if v < 0 {
					wantCode(method+" lock_delay", status, h, body, api.CodeInvalidArgument)
					continue
				}
				holding, _ := body["holding"].(map[string]any)
				if status != http.StatusOK || holding["lockDelayMs"] != "60000" {
					t.Errorf("%s(lock_delay %d): HTTP %d %v, want the holding's lock_delay 60000", method, v, status, body)
				}
			}
			// wait_ms: refused outside [0, 1 h].
			status, h, body = post("Acquire", fmt.Sprintf(`{"name":"absurd-wait","leaseId":%q,"waitMs":"%d"}`, lease, v))
			wantCode("Acquire wait", status, h, body, api.CodeInvalidArgument)
		})
	}
}
