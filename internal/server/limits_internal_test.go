package server

import (
	"net/http"
	"testing"
)

func TestPrincipalOf(t *testing.T) {
	r := func(remote string, h map[string]string) *http.Request {
		req, _ := http.NewRequest("POST", "http://x/", nil)
		req.RemoteAddr = remote
		for k, v := range h {
			req.Header.Set(k, v)
		}
		return req
	}
	node := func(*http.Request) bool { return true }
	ip := principalOf(r("10.0.0.7:5555", nil), node)
	if ip != "ip:10.0.0.7" {
		t.Fatalf("no header: %q", ip)
	}
	if p := principalOf(r("[::1]:5555", nil), node); p != "ip:::1" {
		t.Fatalf("IPv6: %q", p)
	}
	// A bearer token that did not authenticate (auth off lets any
	// through) names no principal: rotating it must not make new ones.
	for _, h := range []string{"Bearer a", "Bearer b", "Basic x"} {
		if p := principalOf(r("10.0.0.7:1", map[string]string{"Authorization": h}), node); p != ip {
			t.Fatalf("Authorization %q: principal %q, want the remote IP's %q", h, p, ip)
		}
	}
	if p := principalOf(r("10.0.0.7:1", map[string]string{principalHeader: "ip:1.2.3.4"}), node); p != ip {
		t.Fatalf("a principal header on a request nobody forwarded was believed: %q", p)
	}
	if p := principalOf(r("10.0.0.8:1", map[string]string{principalHeader: "ip:1.2.3.4", forwardedHeader: "n2"}), node); p != "ip:1.2.3.4" {
		t.Fatalf("a forwarded request keeps its caller's principal: %q", p)
	}
	client := func(*http.Request) bool { return false }
	if p := principalOf(r("10.0.0.8:1", map[string]string{principalHeader: "ip:1.2.3.4", forwardedHeader: "n2"}), client); p != "ip:10.0.0.8" {
		t.Fatalf("a principal header from a caller that is not a node was believed: %q", p)
	}
}
