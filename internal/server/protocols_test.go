package server_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// TestHTTPJSON: a plain HTTP POST with a JSON body calls the API (the
// Connect protocol), and an error comes back as JSON with the code.
func TestHTTPJSON(t *testing.T) {
	t.Parallel()
	c := servertest.Start(t, servertest.Options{})
	post := func(method, body string) (int, string, []byte) {
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
		return resp.StatusCode, resp.Header.Get("Content-Type"), data
	}

	code, ctype, body := post("CreateSession", `{"ttlMs":"5000","owner":"x"}`)
	if code != http.StatusOK || !strings.HasPrefix(ctype, "application/json") {
		t.Fatalf("CreateSession: HTTP %d %s %s", code, ctype, body)
	}
	var sess struct {
		LeaseID string `json:"leaseId"`
		TTLMs   string `json:"ttlMs"`
		Owner   string `json:"owner"`
	}
	if err := json.Unmarshal(body, &sess); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(sess.LeaseID) || sess.TTLMs != "5000" || sess.Owner != "x" {
		t.Fatalf("CreateSession response %s", body)
	}

	code, _, body = post("Acquire", `{"name":"j","leaseId":"`+sess.LeaseID+`"}`)
	var acq struct {
		Holding struct {
			Token string `json:"token"`
		} `json:"holding"`
	}
	if err := json.Unmarshal(body, &acq); code != http.StatusOK || err != nil || acq.Holding.Token == "" {
		t.Fatalf("Acquire: HTTP %d %s", code, body)
	}

	for _, tc := range []struct {
		method, body string
		status       int
		want         api.Code
	}{
		{"CreateSession", `{"ttlMs":"0","owner":"x"}`, http.StatusBadRequest, api.CodeInvalidArgument},
		{"Release", `{"name":"j","leaseId":"` + sess.LeaseID + `","token":"999"}`, http.StatusBadRequest, api.CodeNotHolder},
		{"KvPut", `{"key":"j","value":"dg==","token":"` + acq.Holding.Token + `"}`, http.StatusOK, ""},
		{"KvPut", `{"key":"j","value":"dg==","token":"` + acq.Holding.Token + `","strict":true}`, http.StatusConflict, api.CodeStaleToken},
		{"KeepAlive", `{"leaseId":"` + servertest.UnknownLeaseID() + `"}`, http.StatusNotFound, api.CodeLeaseExpired},
	} {
		code, ctype, body := post(tc.method, tc.body)
		if code != tc.status || !strings.HasPrefix(ctype, "application/json") {
			t.Fatalf("%s %s: HTTP %d %s %s, want %d", tc.method, tc.body, code, ctype, body, tc.status)
		}
		if tc.want == "" {
			continue
		}
		if got := jsonErrorCode(t, body); got != tc.want {
			t.Fatalf("%s %s: error %s carries code %q, want %q", tc.method, tc.body, body, got, tc.want)
		}
	}
}

// jsonErrorCode decodes a Connect JSON error and returns the leasehold code
// of its ErrorDetail.
func jsonErrorCode(t *testing.T, body []byte) api.Code {
	t.Helper()
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Details []struct {
			Type  string `json:"type"`
			Value string `json:"value"`
		} `json:"details"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Code == "" || e.Message == "" {
		t.Fatalf("error body %s is not a Connect JSON error: %v", body, err)
	}
	for _, d := range e.Details {
		if d.Type != "leasehold.v1.ErrorDetail" {
			continue
		}
		raw, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(d.Value, "="))
		if err != nil {
			t.Fatalf("detail value %q: %v", d.Value, err)
		}
		var det pb.ErrorDetail
		if err := proto.Unmarshal(raw, &det); err != nil {
			t.Fatal(err)
		}
		return api.Code(det.GetCode())
	}
	t.Fatalf("error body %s has no leasehold.v1.ErrorDetail", body)
	return ""
}

// TestMetricsAndHealth: /metrics serves the server's metrics and /healthz
// names the leader.
func TestMetricsAndHealth(t *testing.T) {
	t.Parallel()
	c := servertest.Start(t, servertest.Options{})
	s := newSession(t, c.Client, 5000, "m")
	acquire(t, c.Client, "m", s.GetLeaseId())
	get := func(path string) string {
		t.Helper()
		resp, err := c.HTTP.Get(c.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: HTTP %d %s", path, resp.StatusCode, data)
		}
		return string(data)
	}
	metrics := get("/metrics")
	for _, want := range []string{
		`leasehold_rpc_total{code="ok",method="CreateSession"} 1`,
		`leasehold_rpc_total{code="ok",method="Acquire"} 1`,
		`leasehold_rpc_total{code="lease-expired",method="KeepAlive"}`, // servertest's readiness probe
		`leasehold_lock_events_total{type="acquired"} 1`,
		"leasehold_is_leader 1",
		"leasehold_apply_seconds_bucket",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if health := get("/healthz"); !bytes.HasPrefix([]byte(health), []byte("ok node=n1 leader=n1")) {
		t.Fatalf("/healthz = %q", health)
	}
}
