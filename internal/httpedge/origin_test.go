package httpedge_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// TestAuthOffRefusesOtherOrigins: with auth off, a loopback API refuses
// what a web page of another site could send from the operator's browser
// (an Origin that is not the API's own host, or a Host name that is not
// loopback: DNS rebinding) with 403 permission-denied, and keeps
// answering its own dashboard, clients without an Origin, and loopback
// names and addresses.
func TestAuthOffRefusesOtherOrigins(t *testing.T) {
	c := servertest.Start(t, servertest.Options{})
	hostPort := strings.TrimPrefix(c.URL, "http://")
	port := hostPort[strings.LastIndexByte(hostPort, ':'):]
	hc := &http.Client{}
	t.Cleanup(hc.CloseIdleConnections)
	do := func(method, path, host, origin, fetchSite string) (int, string) {
		t.Helper()
		r, err := http.NewRequest(method, c.URL+path, strings.NewReader(`{"ttlMs":10000}`))
		servertest.MustOK(t, "request", err)
		r.Header.Set("Content-Type", "application/json")
		if host != "" {
			r.Host = host
		}
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		if fetchSite != "" {
			r.Header.Set("Sec-Fetch-Site", fetchSite)
		}
		res, err := hc.Do(r)
		servertest.MustOK(t, method+" "+path, err)
		defer res.Body.Close()
		return res.StatusCode, res.Header.Get("Leasehold-Code")
	}
	const create = "/leasehold.v1.LeaseholdService/CreateSession"
	for _, tc := range []struct {
		what, method, path, host, origin, fetchSite string
		want                                        int
	}{
		{"a client without Origin", "POST", create, "", "", "", 200},
		{"the API's own origin", "POST", create, "", c.URL, "", 200},
		{"localhost", "POST", create, "localhost" + port, "", "", 200},
		{"the dashboard, same origin", "GET", "/ui/", "", c.URL, "", 200},
		{"a page of another site", "POST", create, "", "http://evil.example", "", 403},
		{"another port on loopback", "POST", create, "", "http://127.0.0.1:1", "", 403},
		{"an opaque origin", "POST", create, "", "null", "", 403},
		{"DNS rebinding: the page's own name", "POST", create, "evil.example" + port, "http://evil.example" + port, "", 403},
		{"DNS rebinding, no Origin", "GET", "/ui/", "evil.example" + port, "", "same-origin", 403},
		{"a program through another name (a Service)", "POST", create, "leasehold-api" + port, "", "", 200},
	} {
		code, lcode := do(tc.method, tc.path, tc.host, tc.origin, tc.fetchSite)
		if code != tc.want || (tc.want == 403 && lcode != "permission-denied") {
			t.Errorf("%s: %d %q, want %d", tc.what, code, lcode, tc.want)
		}
	}
}
