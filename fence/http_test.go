package fence_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fence"
)

// recordingHandler answers with the status in the X-Status request header (default 200) and
// counts calls.
type recordingHandler struct{ calls atomic.Int64 }

func (h *recordingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.calls.Add(1)
	switch r.Header.Get("X-Status") {
	case "":
		_, _ = io.WriteString(w, "done")
	case "none": // write nothing: an implicit 200
	case "500":
		http.Error(w, "upstream broke", http.StatusInternalServerError)
	case "201":
		w.WriteHeader(http.StatusCreated)
	}
}

type req struct {
	method  string
	path    string
	headers map[string][]string
}

func (q req) do(h http.Handler) *httptest.ResponseRecorder {
	method := q.method
	if method == "" {
		method = http.MethodPost
	}
	p := q.path
	if p == "" {
		p = "/"
	}
	r := httptest.NewRequest(method, p, strings.NewReader("body"))
	for k, vs := range q.headers {
		for _, v := range vs {
			r.Header.Add(k, v)
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func hdr(kv ...string) map[string][]string {
	m := map[string][]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = append(m[kv[i]], kv[i+1])
	}
	return m
}

func decodeError(t *testing.T, w *httptest.ResponseRecorder) fence.HTTPError {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("Content-Type = %q", ct)
	}
	var body fence.HTTPErrorBody
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("error body %q: %v", w.Body.String(), err)
	}
	return body.Error
}

// TestMiddleware walks one key through the seed scenario and the invalid inputs, in order.
func TestMiddleware(t *testing.T) {
	inner := &recordingHandler{}
	a := fence.NewAdmitter(fence.NewMemoryTokenStore())
	h := fence.Middleware(a)(inner)
	const key = "payments:stream-1"

	steps := []struct {
		name      string
		req       req
		status    int
		code      string // error code, "" when the inner handler answered
		reached   bool   // inner handler called
		lastAfter uint64
	}{
		{"read without token passes", req{method: "GET", headers: hdr("Fencing-Key", key)}, 200, "", true, 0},
		{"missing token", req{headers: hdr("Fencing-Key", key)}, 400, "invalid-argument", false, 0},
		{"token 0", req{headers: hdr("Fencing-Key", key, "Fencing-Token", "0")}, 400, "invalid-argument", false, 0},
		{"token not a number", req{headers: hdr("Fencing-Key", key, "Fencing-Token", "17abc")}, 400, "invalid-argument", false, 0},
		{"negative token", req{headers: hdr("Fencing-Key", key, "Fencing-Token", "-17")}, 400, "invalid-argument", false, 0},
		{"two tokens", req{headers: hdr("Fencing-Key", key, "Fencing-Token", "17", "Fencing-Token", "18")}, 400, "invalid-argument", false, 0},
		{"missing key", req{headers: hdr("Fencing-Token", "17")}, 400, "invalid-argument", false, 0},
		{"key too long", req{headers: hdr("Fencing-Key", strings.Repeat("k", 257), "Fencing-Token", "17")}, 400, "invalid-argument", false, 0},
		{"leader A, token 17", req{headers: hdr("Fencing-Key", key, "Fencing-Token", "17")}, 200, "", true, 17},
		{"leader B, token 18", req{headers: hdr("Fencing-Key", key, "Fencing-Token", "18")}, 200, "", true, 18},
		{"stale leader A", req{headers: hdr("Fencing-Key", key, "Fencing-Token", "17")}, 409, "stale-token", false, 18},
		{"upstream 500 still records", req{headers: hdr("Fencing-Key", key, "Fencing-Token", "19", "X-Status", "500")}, 500, "", true, 19},
		{"implicit 200 records", req{headers: hdr("Fencing-Key", key, "Fencing-Token", "19", "X-Status", "none")}, 200, "", true, 19},
		{"201 records", req{headers: hdr("Fencing-Key", key, "Fencing-Token", "20", "X-Status", "201")}, 201, "", true, 20},
		{"same token again", req{method: "PUT", headers: hdr("Fencing-Key", key, "Fencing-Token", "20")}, 200, "", true, 20},
		{"read with stale token is not checked", req{method: "HEAD", headers: hdr("Fencing-Key", key, "Fencing-Token", "1")}, 200, "", true, 20},
	}
	for _, st := range steps {
		before := inner.calls.Load()
		w := st.req.do(h)
		if w.Code != st.status {
			t.Fatalf("%s: status %d, want %d (body %q)", st.name, w.Code, st.status, w.Body.String())
		}
		if reached := inner.calls.Load() > before; reached != st.reached {
			t.Fatalf("%s: inner handler reached = %v, want %v", st.name, reached, st.reached)
		}
		if st.code != "" {
			if e := decodeError(t, w); e.Code != st.code || e.Message == "" {
				t.Fatalf("%s: error %+v, want code %q", st.name, e, st.code)
			}
		}
		if tok, _ := a.LastToken(context.Background(), key); tok != st.lastAfter {
			t.Fatalf("%s: last token %d, want %d", st.name, tok, st.lastAfter)
		}
	}

	// The stale answer carries the details.
	w := req{headers: hdr("Fencing-Key", key, "Fencing-Token", "17")}.do(h)
	e := decodeError(t, w)
	want := fence.HTTPError{Code: "stale-token", Key: key, Token: 17, LastToken: 20, Message: e.Message}
	if e != want || !strings.Contains(e.Message, "stale token 17") {
		t.Fatalf("stale body = %+v, want %+v", e, want)
	}
	if got := w.Header().Get(fence.LastTokenHeader); got != "20" {
		t.Fatalf("%s = %q, want 20", fence.LastTokenHeader, got)
	}
}

func TestMiddlewareOptions(t *testing.T) {
	tests := []struct {
		name   string
		opts   []fence.HTTPOption
		first  req // must be accepted with token 5
		second req // token 4 on the same key: must be refused 409
		bad    req // must be refused 400
	}{
		{
			name:   "key from path is cleaned",
			opts:   []fence.HTTPOption{fence.WithKeyFromPath()},
			first:  req{path: "/accounts/7/../18/", headers: hdr("Fencing-Token", "5")},
			second: req{path: "/accounts/18", headers: hdr("Fencing-Token", "4")},
			bad:    req{path: "/accounts/18", headers: hdr("Fencing-Token", "")},
		},
		{
			name:   "custom headers",
			opts:   []fence.HTTPOption{fence.WithKeyHeader("X-Stream"), fence.WithTokenHeader("x-epoch")},
			first:  req{headers: hdr("X-Stream", "s1", "X-Epoch", "5")},
			second: req{headers: hdr("X-Stream", "s1", "X-Epoch", "4", "Fencing-Token", "99")},
			bad:    req{headers: hdr("X-Stream", "s1", "Fencing-Token", "6")},
		},
		{
			name:   "fenced reads",
			opts:   []fence.HTTPOption{fence.WithFenceReads(true)},
			first:  req{method: "GET", headers: hdr("Fencing-Key", "k", "Fencing-Token", "5")},
			second: req{method: "GET", headers: hdr("Fencing-Key", "k", "Fencing-Token", "4")},
			bad:    req{method: "GET", headers: hdr("Fencing-Key", "k")},
		},
		{
			name: "key func",
			opts: []fence.HTTPOption{fence.WithKeyFunc(func(r *http.Request) (string, error) {
				if v := r.URL.Query().Get("stream"); v != "" {
					return "stream:" + v, nil
				}
				return "", errors.New("no stream parameter")
			})},
			first:  req{path: "/charge?stream=9", headers: hdr("Fencing-Token", "5")},
			second: req{path: "/refund?stream=9", headers: hdr("Fencing-Token", "4")},
			bad:    req{path: "/charge", headers: hdr("Fencing-Token", "6")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inner := &recordingHandler{}
			h := fence.Middleware(fence.NewAdmitter(fence.NewMemoryTokenStore()), tt.opts...)(inner)
			if w := tt.first.do(h); w.Code != 200 {
				t.Fatalf("first: %d %s", w.Code, w.Body)
			}
			if w := tt.second.do(h); w.Code != 409 {
				t.Fatalf("second: %d %s, want 409", w.Code, w.Body)
			}
			if w := tt.bad.do(h); w.Code != 400 || decodeError(t, w).Code != "invalid-argument" {
				t.Fatalf("bad: %d %s, want 400", w.Code, w.Body)
			}
			if n := inner.calls.Load(); n != 1 {
				t.Fatalf("inner handler called %d times, want 1", n)
			}
		})
	}
}

// TestMiddlewareCommitFailure: when the token cannot be recorded the client must not see the
// handler's 2xx; by default the handler is not even called.
func TestMiddlewareCommitFailure(t *testing.T) {
	for _, p := range []fence.RecordPolicy{fence.RecordBefore, fence.RecordUnless4xx} {
		t.Run(p.String(), func(t *testing.T) {
			store := &failingStore{MemoryTokenStore: fence.NewMemoryTokenStore(), failing: true}
			inner := &recordingHandler{}
			h := fence.Middleware(fence.NewAdmitter(store), fence.WithRecordPolicy(p))(inner)
			w := req{headers: hdr("Fencing-Key", "k", "Fencing-Token", "3")}.do(h)
			if w.Code != 500 {
				t.Fatalf("status %d, want 500", w.Code)
			}
			if e := decodeError(t, w); e.Code != "internal" || !strings.Contains(e.Message, "disk full") {
				t.Fatalf("error %+v", e)
			}
			if strings.Contains(w.Body.String(), "done") {
				t.Fatalf("the handler's body leaked into the error: %q", w.Body)
			}
			if reached, want := inner.calls.Load() > 0, p == fence.RecordUnless4xx; reached != want {
				t.Fatalf("handler reached = %v, want %v", reached, want)
			}
		})
	}
}

// TestMiddlewareSerializes: a request waits while another request for its key is inside the
// handler, and gives up with 503 after the lock timeout; other keys go through meanwhile.
func TestMiddlewareSerializes(t *testing.T) {
	entered := make(chan string, 4)
	release := make(chan struct{})
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- r.Header.Get("Fencing-Key")
		if r.Header.Get("Fencing-Key") == "slow" {
			<-release
		}
	})
	h := fence.Middleware(fence.NewAdmitter(fence.NewMemoryTokenStore()), fence.WithLockTimeout(50*time.Millisecond))(inner)

	var wg sync.WaitGroup
	slow := make(chan int, 1)
	wg.Go(func() { slow <- req{headers: hdr("Fencing-Key", "slow", "Fencing-Token", "1")}.do(h).Code })
	if k := <-entered; k != "slow" {
		t.Fatalf("entered %q", k)
	}
	w := req{headers: hdr("Fencing-Key", "slow", "Fencing-Token", "2")}.do(h)
	if w.Code != 503 || w.Header().Get("Retry-After") == "" || decodeError(t, w).Code != "unavailable" {
		t.Fatalf("second request on a busy key: %d %s", w.Code, w.Body)
	}
	if w := (req{headers: hdr("Fencing-Key", "fast", "Fencing-Token", "1")}).do(h); w.Code != 200 {
		t.Fatalf("other key: %d", w.Code)
	}
	if k := <-entered; k != "fast" {
		t.Fatalf("entered %q", k)
	}
	close(release)
	wg.Wait()
	if code := <-slow; code != 200 {
		t.Fatalf("slow request: %d", code)
	}
	select {
	case k := <-entered:
		t.Fatalf("the timed-out request reached the handler (%q)", k)
	default:
	}
}
