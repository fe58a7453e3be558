package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/gateway"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// upstream is a payment service that checks nothing: it applies every request it gets,
// so the last request to arrive wins (seed 004's unprotected store).
type upstream struct {
	srv *httptest.Server

	mu       sync.Mutex        // protects the fields below
	requests []string          // "METHOD path key token" in arrival order
	state    map[string]string // key -> last body written
	inflight map[string]int    // key -> requests being served now
	maxIn    int               // the most requests for one key ever served at once
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{state: map[string]string{}, inflight: map[string]int{}}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Fencing-Key")
	if key == "" {
		key = r.URL.Path
	}
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.requests = append(u.requests, fmt.Sprintf("%s %s %s %s", r.Method, r.URL.Path, key, r.Header.Get("Fencing-Token")))
	u.inflight[key]++
	u.maxIn = max(u.maxIn, u.inflight[key])
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.inflight[key]--
		u.mu.Unlock()
	}()
	if s := r.Header.Get("X-Status"); s != "" {
		code, _ := strconv.Atoi(s)
		http.Error(w, "upstream says "+s, code)
		return
	}
	if r.Method == http.MethodGet {
		u.mu.Lock()
		v := u.state[key]
		u.mu.Unlock()
		_, _ = io.WriteString(w, v)
		return
	}
	u.mu.Lock()
	u.state[key] = string(body)
	u.mu.Unlock()
	_, _ = io.WriteString(w, "applied "+string(body))
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.requests)
}

func (u *upstream) value(key string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.state[key]
}

// testGateway is a Gateway behind a real HTTP server.
type testGateway struct {
	g   *gateway.Gateway
	srv *httptest.Server
}

func startGateway(t *testing.T, cfg gateway.Config) *testGateway {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler())
	tg := &testGateway{g: g, srv: srv}
	t.Cleanup(tg.stop)
	return tg
}

func (tg *testGateway) stop() {
	tg.srv.Close()
	_ = tg.g.Close()
}

func config(t *testing.T, u *upstream, dataFile string) gateway.Config {
	cfg := gateway.DefaultConfig()
	cfg.Upstream = u.srv.URL
	cfg.DataFile = dataFile
	if dataFile == "" {
		cfg.DataFile = filepath.Join(t.TempDir(), "gateway.db")
	}
	return cfg
}

type response struct {
	status int
	body   string
	err    fence.HTTPError // set for JSON error bodies
	header http.Header
}

func (tg *testGateway) send(t *testing.T, method, path string, headers ...string) response {
	t.Helper()
	body := ""
	if method != http.MethodGet && method != http.MethodHead {
		body = "charge with " + strings.Join(headers, " ")
	}
	r, err := http.NewRequest(method, tg.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	resp, err := tg.srv.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := response{status: resp.StatusCode, body: string(b), header: resp.Header}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		var eb fence.HTTPErrorBody
		if err := json.Unmarshal(b, &eb); err != nil {
			t.Fatalf("JSON error body %q: %v", b, err)
		}
		out.err = eb.Error
	}
	return out
}

func charge(t *testing.T, tg *testGateway, key string, token string, extra ...string) response {
	t.Helper()
	return tg.send(t, http.MethodPost, "/charge", append([]string{"Fencing-Key", key, "Fencing-Token", token}, extra...)...)
}

// TestGatewaySeed004 is seed 004: leader A (token 17) pauses, leader B (token 18) charges,
// A's late charge is refused by the gateway and never reaches the payment service — also
// after a gateway restart.
func TestGatewaySeed004(t *testing.T) {
	u := newUpstream(t)
	dataFile := filepath.Join(t.TempDir(), "gateway.db")
	tg := startGateway(t, config(t, u, dataFile))
	const key = "payments:stream-1"

	if r := charge(t, tg, key, "17"); r.status != 200 {
		t.Fatalf("token 17: %d %s", r.status, r.body)
	}
	if r := charge(t, tg, key, "18"); r.status != 200 {
		t.Fatalf("token 18: %d %s", r.status, r.body)
	}
	seen := u.count()

	r := charge(t, tg, key, "17")
	want := fence.HTTPError{Code: "stale-token", Message: r.err.Message, Key: key, Token: 17, LastToken: 18}
	if r.status != http.StatusConflict || r.err != want || r.err.Message == "" {
		t.Fatalf("stale leader: %d %+v, want 409 %+v", r.status, r.err, want)
	}
	if !strings.Contains(r.body, `"last_token":18`) {
		t.Fatalf("body %s lacks last_token", r.body)
	}
	if u.count() != seen {
		t.Fatal("the stale request reached the upstream")
	}
	if v := u.value(key); !strings.Contains(v, "Fencing-Token 18") {
		t.Fatalf("upstream state %q, want leader B's charge", v)
	}

	// Restart the gateway on the same file: the stale token is still refused.
	tg.stop()
	tg2 := startGateway(t, config(t, u, dataFile))
	if tok, err := tg2.g.LastToken(context.Background(), key); err != nil || tok != 18 {
		t.Fatalf("after restart LastToken = %d, %v", tok, err)
	}
	if r := charge(t, tg2, key, "17"); r.status != http.StatusConflict || r.err.LastToken != 18 {
		t.Fatalf("stale leader after restart: %d %+v", r.status, r.err)
	}
	if u.count() != seen {
		t.Fatal("the stale request reached the upstream after restart")
	}
	if r := charge(t, tg2, key, "18"); r.status != 200 {
		t.Fatalf("leader B after restart: %d %s", r.status, r.body)
	}
}

// TestGatewayRequests is table-driven over one key, in order.
func TestGatewayRequests(t *testing.T) {
	u := newUpstream(t)
	tg := startGateway(t, config(t, u, ""))
	const key = "k"
	steps := []struct {
		name     string
		method   string
		headers  []string
		status   int
		code     string
		upstream bool // the request reached the upstream
		last     uint64
	}{
		{"read without token", "GET", []string{"Fencing-Key", key}, 200, "", true, 0},
		{"write without token", "POST", []string{"Fencing-Key", key}, 400, "invalid-argument", false, 0},
		{"malformed token", "POST", []string{"Fencing-Key", key, "Fencing-Token", "12x"}, 400, "invalid-argument", false, 0},
		{"token 0", "POST", []string{"Fencing-Key", key, "Fencing-Token", "0"}, 400, "invalid-argument", false, 0},
		{"token overflow", "POST", []string{"Fencing-Key", key, "Fencing-Token", "18446744073709551616"}, 400, "invalid-argument", false, 0},
		{"no key", "POST", []string{"Fencing-Token", "5"}, 400, "invalid-argument", false, 0},
		{"key of 257 bytes", "POST", []string{"Fencing-Key", strings.Repeat("k", 257), "Fencing-Token", "5"}, 400, "invalid-argument", false, 0},
		{"accepted", "PUT", []string{"Fencing-Key", key, "Fencing-Token", "5"}, 200, "", true, 5},
		{"upstream 503 records the token", "POST", []string{"Fencing-Key", key, "Fencing-Token", "6", "X-Status", "503"}, 503, "", true, 6},
		{"upstream 409 records the token", "DELETE", []string{"Fencing-Key", key, "Fencing-Token", "9", "X-Status", "409"}, 409, "", true, 9},
		{"so 6 is stale now", "PATCH", []string{"Fencing-Key", key, "Fencing-Token", "6"}, 409, "stale-token", false, 9},
		{"equal token passes (monotonic)", "POST", []string{"Fencing-Key", key, "Fencing-Token", "9"}, 200, "", true, 9},
		{"stale", "POST", []string{"Fencing-Key", key, "Fencing-Token", "5"}, 409, "stale-token", false, 9},
		{"max token", "POST", []string{"Fencing-Key", key, "Fencing-Token", "18446744073709551615"}, 200, "", true, 18446744073709551615},
	}
	for _, st := range steps {
		before := u.count()
		r := tg.send(t, st.method, "/x", st.headers...)
		if r.status != st.status || r.err.Code != st.code {
			t.Fatalf("%s: %d %q (%s), want %d %q", st.name, r.status, r.err.Code, r.body, st.status, st.code)
		}
		if reached := u.count() > before; reached != st.upstream {
			t.Fatalf("%s: reached upstream = %v, want %v", st.name, reached, st.upstream)
		}
		if tok, err := tg.g.LastToken(context.Background(), key); err != nil || tok != st.last {
			t.Fatalf("%s: last token %d %v, want %d", st.name, tok, err, st.last)
		}
	}
}

func TestGatewayModes(t *testing.T) {
	t.Run("strict", func(t *testing.T) {
		u := newUpstream(t)
		cfg := config(t, u, "")
		cfg.Strict = true
		tg := startGateway(t, cfg)
		if r := charge(t, tg, "k", "3"); r.status != 200 {
			t.Fatal(r.status)
		}
		if r := charge(t, tg, "k", "3"); r.status != 409 || r.err.LastToken != 3 {
			t.Fatalf("strict equal token: %d %+v", r.status, r.err)
		}
	})
	t.Run("fence reads and key from path", func(t *testing.T) {
		u := newUpstream(t)
		cfg := config(t, u, "")
		cfg.FenceReads = true
		cfg.KeyFrom = gateway.KeyFromPath
		tg := startGateway(t, cfg)
		if r := tg.send(t, "GET", "/streams/1"); r.status != 400 || r.err.Code != "invalid-argument" {
			t.Fatalf("read without token: %d %+v", r.status, r.err)
		}
		if r := tg.send(t, "GET", "/streams/1", "Fencing-Token", "4"); r.status != 200 {
			t.Fatalf("read with token: %d", r.status)
		}
		if r := tg.send(t, "POST", "/streams/2/../1", "Fencing-Token", "3"); r.status != 409 || r.err.Key != "/streams/1" {
			t.Fatalf("write on another spelling of the path: %d %+v", r.status, r.err)
		}
		if r := tg.send(t, "POST", "/streams/2", "Fencing-Token", "3"); r.status != 200 {
			t.Fatalf("other path: %d %s", r.status, r.body)
		}
	})
}

// TestGatewayUpstreamDown: an unreachable upstream answers 502. The token was recorded before
// forwarding (the gateway cannot tell a refused dial from a lost answer in general), which
// costs a monotonic holder nothing: it retries with the same token.
func TestGatewayUpstreamDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	cfg := gateway.DefaultConfig()
	cfg.Upstream = "http://" + addr
	cfg.DataFile = filepath.Join(t.TempDir(), "gateway.db")
	tg := startGateway(t, cfg)
	r := charge(t, tg, "k", "7")
	if r.status != http.StatusBadGateway || r.err.Code != "unavailable" {
		t.Fatalf("upstream down: %d %+v", r.status, r.err)
	}
	if tok, _ := tg.g.LastToken(context.Background(), "k"); tok != 7 {
		t.Fatalf("token %d recorded, want 7 (recorded before forwarding)", tok)
	}
	if r := charge(t, tg, "k", "7"); r.status != http.StatusBadGateway {
		t.Fatalf("retry with the same token: %d %+v, want to reach the (still down) upstream", r.status, r.err)
	}
}

// TestGatewayConcurrent: writers race shuffled tokens through the gateway. The upstream never
// serves two requests for one key at once, applies tokens in non-decreasing order, and ends
// with the highest token's write; different keys proceed in parallel.
func TestGatewayConcurrent(t *testing.T) {
	const (
		workers = 32
		tokens  = 200
	)
	u := newUpstream(t)
	tg := startGateway(t, config(t, u, ""))
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))

	keys := []string{"stream-a", "stream-b"}
	type job struct {
		key   string
		token int
	}
	var jobs []job
	for _, key := range keys {
		p := make([]int, tokens)
		for i := range p {
			p[i] = i + 1
		}
		for w := 0; w < tokens; w += 8 { // shuffled within windows: many accepts, many races
			win := p[w:min(w+8, tokens)]
			rng.Shuffle(len(win), func(i, j int) { win[i], win[j] = win[j], win[i] })
		}
		for _, tok := range p {
			jobs = append(jobs, job{key, tok})
		}
	}
	work := make(chan job, len(jobs))
	for _, j := range jobs {
		work <- j
	}
	close(work)

	var accepted, refused atomic.Int64
	var wg sync.WaitGroup
	client := tg.srv.Client()
	for range workers {
		wg.Go(func() {
			for j := range work {
				r, _ := http.NewRequest("POST", tg.srv.URL+"/charge", strings.NewReader(fmt.Sprintf("t%d", j.token)))
				r.Header.Set("Fencing-Key", j.key)
				r.Header.Set("Fencing-Token", strconv.Itoa(j.token))
				resp, err := client.Do(r)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case 200:
					accepted.Add(1)
				case 409:
					refused.Add(1)
				default:
					t.Errorf("token %d: status %d", j.token, resp.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d accepted, %d refused", accepted.Load(), refused.Load())

	u.mu.Lock()
	defer u.mu.Unlock()
	if int(accepted.Load()) != len(u.requests) {
		t.Fatalf("%d accepted but the upstream saw %d requests", accepted.Load(), len(u.requests))
	}
	if u.maxIn != 1 {
		t.Fatalf("the upstream served %d requests for one key at once", u.maxIn)
	}
	last := map[string]int{}
	for i, line := range u.requests {
		var key string
		var tok int
		if _, err := fmt.Sscanf(line, "POST /charge %s %d", &key, &tok); err != nil {
			t.Fatalf("request %q: %v", line, err)
		}
		if tok < last[key] {
			t.Fatalf("upstream request %d applied token %d on %s after token %d", i, tok, key, last[key])
		}
		last[key] = tok
	}
	for _, key := range keys {
		if last[key] != tokens {
			t.Errorf("key %s: last applied token %d, want %d", key, last[key], tokens)
		}
		if got := u.state[key]; got != fmt.Sprintf("t%d", tokens) {
			t.Errorf("key %s ends with %q, want t%d", key, got, tokens)
		}
	}
}

func TestGatewayClose(t *testing.T) {
	u := newUpstream(t)
	tg := startGateway(t, config(t, u, ""))
	if err := tg.g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tg.g.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if r := charge(t, tg, "k", "1"); r.status != 503 || r.err.Code != "unavailable" {
		t.Fatalf("after Close: %d %+v", r.status, r.err)
	}
	if _, err := tg.g.LastToken(context.Background(), "k"); !errors.Is(err, gateway.ErrClosed) {
		t.Fatalf("LastToken after Close = %v", err)
	}
	if u.count() != 0 {
		t.Fatal("a request reached the upstream after Close")
	}
}

// TestGatewayServe: ListenAndServe serves until its context ends, then returns nil.
func TestGatewayServe(t *testing.T) {
	u := newUpstream(t)
	cfg := config(t, u, "")
	cfg.Listen = "127.0.0.1:0"
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln) }()

	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	r, _ := http.NewRequest("POST", "http://"+ln.Addr().String()+"/x", strings.NewReader("v"))
	r.Header.Set("Fencing-Key", "k")
	r.Header.Set("Fencing-Token", "2")
	resp, err := client.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve = %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*gateway.Config)
		want   string // substring of the error; "" for valid
	}{
		{"default with upstream", func(c *gateway.Config) {}, ""},
		{"no upstream", func(c *gateway.Config) { c.Upstream = "" }, "upstream URL is required"},
		{"ftp upstream", func(c *gateway.Config) { c.Upstream = "ftp://x" }, "scheme"},
		{"no host", func(c *gateway.Config) { c.Upstream = "http://" }, "no host"},
		{"key-from", func(c *gateway.Config) { c.KeyFrom = "query" }, "key-from"},
		{"path needs no key header", func(c *gateway.Config) { c.KeyFrom = gateway.KeyFromPath; c.KeyHeader = "" }, ""},
		{"bad key header", func(c *gateway.Config) { c.KeyHeader = "Fencing Key" }, "key header"},
		{"bad token header", func(c *gateway.Config) { c.TokenHeader = "" }, "token header"},
		{"same headers", func(c *gateway.Config) { c.TokenHeader = "fencing-key" }, "both"},
		{"no data file", func(c *gateway.Config) { c.DataFile = "" }, "data file"},
		{"lock timeout", func(c *gateway.Config) { c.LockTimeout = 0 }, "lock timeout"},
		{"upstream timeout", func(c *gateway.Config) { c.UpstreamTimeout = -1 }, "upstream timeout"},
		{"shutdown timeout", func(c *gateway.Config) { c.ShutdownTimeout = -1 }, "shutdown timeout"},
	}
	for _, tt := range tests {
		cfg := gateway.DefaultConfig()
		cfg.Upstream = "http://127.0.0.1:8080/base"
		tt.mutate(&cfg)
		err := cfg.Validate()
		if tt.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		if !errors.Is(err, gateway.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Validate = %v, want ErrInvalidConfig mentioning %q", tt.name, err, tt.want)
		}
	}
	if _, err := gateway.New(gateway.DefaultConfig()); !errors.Is(err, gateway.ErrInvalidConfig) {
		t.Fatalf("New with no upstream = %v", err)
	}
}
