package server_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/admission"
	"github.com/leasehold/leasehold/internal/harness/servertest"
	"github.com/leasehold/leasehold/internal/server"
)

func withLimits(f func(l *admission.Limits)) servertest.Options {
	return servertest.Options{Configure: func(cfg *server.Config) { f(&cfg.Limits) }}
}

// as returns a gRPC client that is a principal of its own: its requests
// carry the bearer token who (the principal with auth on, for a token the
// cluster issued) and, through a transport of h2c, come from a loopback
// address of their own (the principal with auth off, where a bearer token
// that did not authenticate names no one).
func as(c *servertest.Cluster, rt http.RoundTripper, who string) client {
	return leaseholdv1connect.NewLeaseholdServiceClient(&http.Client{Transport: bearer{fromAddr{rt, sourceAddr(who)}, who}}, c.URL, connect.WithGRPC())
}

func wantLimit(t *testing.T, what string, err error, limit string) {
	t.Helper()
	wantCode(t, what, err, api.CodeResourceExhausted)
	if !strings.Contains(err.Error(), "serve --limit "+limit+"=N") {
		t.Fatalf("%s: %v does not name the flag serve --limit %s=N", what, err, limit)
	}
}

func TestLimitsSetAndValidate(t *testing.T) {
	l := admission.DefaultLimits()
	mustOK(t, "default limits", l.Validate())
	for name, value := range map[string]string{"request-bytes": "64KiB", "conns": "10", "idle-timeout": "90s", "rate": "12.5", "watches-per-principal": "0"} {
		mustOK(t, name, l.Set(name, value))
	}
	if l.RequestBytes != 64<<10 || l.Conns != 10 || l.IdleTimeout != 90*time.Second || l.Rate != 12.5 || l.WatchesPerPrincipal != 0 {
		t.Fatalf("Set gave %+v", l)
	}
	if err := l.Set("watchez", "1"); err == nil || !strings.Contains(err.Error(), "watches-per-principal") {
		t.Fatalf("unknown limit: %v, want an error listing the names", err)
	}
	if err := l.Set("conns", "many"); err == nil {
		t.Fatal("conns=many accepted")
	}
	for _, bad := range []func(*admission.Limits){
		func(l *admission.Limits) { l.Conns = -1 },
		func(l *admission.Limits) { l.RequestBytes = 100 },
		func(l *admission.Limits) { l.Rate, l.Burst = 10, 0 },
		func(l *admission.Limits) { l.IdleTimeout = -time.Second },
	} {
		l := admission.DefaultLimits()
		bad(&l)
		if l.Validate() == nil {
			t.Errorf("Validate accepted %+v", l)
		}
	}
	cfg := server.DefaultConfig(t.TempDir(), "127.0.0.1:1")
	cfg.Limits.Watches = -1
	if _, err := server.Open(cfg); err == nil || !strings.Contains(err.Error(), "watches") {
		t.Fatalf("Open with a negative limit: %v", err)
	}
}

// openWatches opens a watch on "w:" through each client and sorts them
// into registered (held open until ctx ends) and refused: once every
// stream has its answer headers, one event is published, which each
// registered watch receives and no refused one does.
func openWatches(ctx context.Context, t *testing.T, c *servertest.Cluster, cls []client) (ok, refused int) {
	t.Helper()
	streams := make([]*connect.ServerStreamForClient[pb.WatchResponse], len(cls))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 200) // openers at a time
	for i, cl := range cls {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			st, err := cl.Watch(ctx, req(&pb.WatchRequest{Prefix: "w:"}))
			if err != nil {
				t.Errorf("watch: %v", err)
				return
			}
			st.ResponseHeader() // sent once the watch is registered (or refused)
			streams[i] = st
			context.AfterFunc(ctx, func() { _ = st.Close() })
		})
	}
	wg.Wait()
	s := newSession(t, c.Client, 10000, "trigger")
	acquire(t, c.Client, "w:trigger", s.GetLeaseId())
	_, err := c.Client.CloseSession(ctxT(t), req(&pb.CloseSessionRequest{LeaseId: s.GetLeaseId()}))
	mustOK(t, "close the trigger session", err)
	var mu sync.Mutex
	for _, st := range streams {
		if st == nil {
			continue
		}
		wg.Go(func() {
			got := st.Receive()
			mu.Lock()
			defer mu.Unlock()
			switch err := st.Err(); {
			case got:
				ok++
			case api.CodeOf(err) == api.CodeResourceExhausted:
				refused++
				if !strings.Contains(err.Error(), "serve --limit watches") {
					t.Errorf("refusal %v does not name its flag", err)
				}
			default:
				t.Errorf("watch ended otherwise: %v", err)
			}
		})
	}
	wg.Wait()
	return ok, refused
}

// TestLimitWatchFlood opens 1 000 watch streams from 50 principals
// against a node that allows 100: the rest are refused, the canary keeps
// its lock and its p99, and the places come back when the streams end.
func TestLimitWatchFlood(t *testing.T) {
	c := servertest.Start(t, withLimits(func(l *admission.Limits) { l.Watches, l.WatchesPerPrincipal = 100, 20 }))
	k := startCanary(t, c)
	idle := k.p99(100)
	rt := h2c()
	t.Cleanup(rt.CloseIdleConnections)
	var ok, refused int
	k.during("1000 watch streams", idle, func(ctx context.Context, ready func()) {
		var cls []client
		for i := range 1000 {
			cls = append(cls, as(c, rt, principalName(i%50)))
		}
		ok, refused = openWatches(ctx, t, c, cls)
		ready()
		<-ctx.Done()
	})
	if ok != 100 || refused != 900 {
		t.Fatalf("%d watches registered, %d refused; want 100 and 900", ok, refused)
	}
	// The places are given back when the streams end.
	err := servertest.Eventually(10*time.Second, func() bool {
		ctx, cancel := context.WithCancel(ctxT(t))
		defer cancel()
		ok, _ := openWatches(ctx, t, c, []client{c.Client})
		return ok == 1
	})
	mustOK(t, "watch after the flood", err)
}

func TestLimitWatchesPerPrincipal(t *testing.T) {
	c := servertest.Start(t, withLimits(func(l *admission.Limits) { l.Watches, l.WatchesPerPrincipal = 100, 3 }))
	rt := h2c()
	t.Cleanup(rt.CloseIdleConnections)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	a := as(c, rt, "a")
	if ok, refused := openWatches(ctx, t, c, []client{a, a, a, a, a, as(c, rt, "b")}); ok != 4 || refused != 2 {
		t.Fatalf("%d watches registered, %d refused; want a's 3 and b's 1 registered, 2 refused", ok, refused)
	}
	_, err := openOne(ctx, a)
	wantLimit(t, "watch of a", err, "watches-per-principal")
}

// openOne opens one watch and waits for its first answer: an event or
// a refusal.
func openOne(ctx context.Context, cl client) (bool, error) {
	st, err := cl.Watch(ctx, req(&pb.WatchRequest{Prefix: "w:"}))
	if err != nil {
		return false, err
	}
	defer st.Close()
	return st.Receive(), st.Err()
}

// TestLimitConnFlood opens 2 000 idle TCP connections against a node that
// allows 300: the rest are answered with a 429 naming the limit and
// closed, and the canary keeps its lock and its p99.
func TestLimitConnFlood(t *testing.T) {
	c := servertest.Start(t, withLimits(func(l *admission.Limits) { l.Conns = 300 }))
	k := startCanary(t, c)
	idle := k.p99(100)
	var held, refused atomic.Int64
	var other atomic.Value
	k.during("2000 idle connections", idle, func(ctx context.Context, ready func()) {
		var wg sync.WaitGroup
		for range 2000 {
			conn, err := net.Dial("tcp", c.Addr)
			if err != nil {
				other.Store(err)
				break
			}
			context.AfterFunc(ctx, func() { _ = conn.Close() })
			wg.Go(func() {
				b, err := io.ReadAll(bufio.NewReader(conn))
				switch {
				case bytes.HasPrefix(b, []byte("HTTP/1.1 429")) && bytes.Contains(b, []byte("serve --limit conns=N")):
					refused.Add(1)
				case ctx.Err() != nil:
					held.Add(1)
				default:
					other.Store(fmt.Errorf("read %q, %v", b, err))
				}
			})
		}
		// Full strength once every refusal has arrived: ending the flood
		// earlier would close connections the server has not answered yet
		// and count them as held.
		_ = servertest.Eventually(45*time.Second, func() bool { return refused.Load() >= 1700 })
		ready()
		<-ctx.Done()
		wg.Wait()
	})
	if e := other.Load(); e != nil {
		t.Fatalf("a connection failed otherwise: %v", e)
	}
	// 300 minus the canary's and the test clients' connections were held.
	if r := refused.Load(); r < 1700 || held.Load() > 300 || r+held.Load() != 2000 {
		t.Fatalf("%d connections held, %d refused; want at most 300 held and the rest refused", held.Load(), r)
	}
}

// TestLimitSilentConnectionsClosed: a connection that never sends a
// request is closed after the read-header timeout, HTTP/2 or not.
func TestLimitSilentConnectionsClosed(t *testing.T) {
	c := servertest.Start(t, withLimits(func(l *admission.Limits) { l.ReadHeaderTimeout = 300 * time.Millisecond }))
	for _, first := range []string{"", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "POST / HTTP/1.1\r\n"} {
		conn, err := net.Dial("tcp", c.Addr)
		mustOK(t, "dial", err)
		_, err = io.WriteString(conn, first)
		mustOK(t, "write", err)
		closed := make(chan error, 1)
		go func() { _, err := io.Copy(io.Discard, conn); closed <- err }()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Errorf("a connection that sent %q is still open after 10 s", first)
		}
		_ = conn.Close()
	}
}

// rawPost sends head (request line and headers) and body on a new
// connection and returns the response.
func rawPost(t *testing.T, addr, head string, body io.Reader) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	mustOK(t, "dial", err)
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
	_, err = io.WriteString(conn, head)
	mustOK(t, "write head", err)
	if body != nil {
		go func() { _, _ = io.Copy(conn, body) }()
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	mustOK(t, "read response", err)
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// endless is a request body without end; it counts what was read of it
// and stops at cap so that a server that reads all of it cannot hang the
// test.
type endless struct {
	n   atomic.Int64
	cap int64
}

func (e *endless) Read(p []byte) (int, error) {
	if e.n.Load() >= e.cap {
		return 0, io.EOF
	}
	clear(p)
	e.n.Add(int64(len(p)))
	return len(p), nil
}

func TestLimitRequestBody(t *testing.T) {
	c := servertest.Start(t, servertest.Options{})
	const path = leaseholdv1connect.LeaseholdServiceKvPutProcedure

	t.Run("announced too large is refused before the body is sent", func(t *testing.T) {
		resp, b := rawPost(t, c.Addr, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n", nil)
		if resp.StatusCode != http.StatusTooManyRequests || !bytes.Contains(b, []byte("resource_exhausted")) || !bytes.Contains(b, []byte("serve --limit request-bytes=N")) {
			t.Fatalf("got %s %s", resp.Status, b)
		}
	})

	t.Run("an endless chunked body is cut at the limit", func(t *testing.T) {
		body := &endless{cap: 1 << 30}
		hr, err := http.NewRequest("POST", c.URL+path, body)
		mustOK(t, "request", err)
		hr.Header.Set("Content-Type", "application/proto")
		resp, err := c.HTTP.Do(hr)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusTooManyRequests || !bytes.Contains(b, []byte("serve --limit request-bytes=N")) {
				t.Fatalf("got %s %s", resp.Status, b)
			}
		}
		if n := body.n.Load(); n > 16<<20 {
			t.Fatalf("the server read %d bytes of an endless body; the limit is 1 MiB", n)
		}
	})

	t.Run("a compressed message is bounded after decompression", func(t *testing.T) {
		gz := leaseholdv1connect.NewLeaseholdServiceClient(&http.Client{Transport: h2c()}, c.URL, connect.WithGRPC(), connect.WithSendGzip())
		_, err := gz.KvPut(ctxT(t), req(&pb.KvPutRequest{Key: "k", Value: make([]byte, 2<<20), Token: 1}))
		wantCode(t, "KVPut of 2 MiB zeros, gzip'd", err, api.CodeResourceExhausted)
	})
}

// TestLimitReadTimeout: a body that stalls is cut at the read timeout,
// while a call whose body was read may wait longer (a queued Acquire over
// HTTP/1.1 is not ended by the deadline).
func TestLimitReadTimeout(t *testing.T) {
	c := servertest.Start(t, withLimits(func(l *admission.Limits) { l.ReadTimeout = 500 * time.Millisecond }))
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write([]byte("{")) }() // and then nothing
	resp, b := rawPost(t, c.Addr, "POST /leasehold.v1.LeaseholdService/KVPut HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n", pr)
	if resp.StatusCode == http.StatusOK {
		t.Fatalf("a stalled body was answered %s %s", resp.Status, b)
	}

	holder := newSession(t, c.Client, 60000, "holder")
	acquire(t, c.Client, "rt", holder.GetLeaseId())
	waiter := newSession(t, c.Client, 60000, "waiter")
	start := time.Now()
	_, err := c.JSON.Acquire(ctxT(t), req(&pb.AcquireRequest{Name: "rt", LeaseId: waiter.GetLeaseId(), WaitMs: 2000}))
	wantCode(t, "a queued Acquire that waits 4 read timeouts", err, api.CodeDeadlineExceeded)
	if waited := time.Since(start); waited < 2*time.Second {
		t.Fatalf("the queued Acquire ended after %v, before its wait of 2 s: %v", waited, err)
	}
}

// TestLimitRate runs on a manual clock: a principal gets its burst, then
// resource-exhausted, then rate more tokens per second of the clock;
// other principals and renewals are not affected.
func TestLimitRate(t *testing.T) {
	c, clk := startManual(t, withLimits(func(l *admission.Limits) { l.Rate, l.Burst = 50, 100 }))
	rt := h2c()
	t.Cleanup(rt.CloseIdleConnections)
	a := as(c, rt, "a")
	status := func(cl client) error {
		_, err := cl.Status(ctxT(t), req(&pb.StatusRequest{Name: "r"}))
		return err
	}
	for i := range 100 {
		mustOK(t, fmt.Sprint("request ", i), status(a))
	}
	err := status(a)
	wantLimit(t, "request 101", err, "rate")
	if !strings.Contains(err.Error(), "rate limit of 50 req/s (burst 100) for principal ip:127.1.") {
		t.Fatalf("message %q does not state the rate and principal", err)
	}
	_, err = a.KeepAlive(ctxT(t), req(&pb.KeepAliveRequest{LeaseId: servertest.UnknownLeaseID()}))
	wantCode(t, "a renewal is not metered", err, api.CodeLeaseExpired)
	mustOK(t, "another principal", status(as(c, rt, "b")))
	clk.Advance(time.Second)
	for i := range 50 {
		mustOK(t, fmt.Sprint("request after 1 s ", i), status(a))
	}
	wantLimit(t, "request 51 after 1 s", status(a), "rate")
}

// TestLimitRateFlood: a principal flooding requests is refused, and the
// canary (another principal) keeps its lock and its p99. The rate is low
// enough that 8 flooding goroutines exceed it even on a loaded machine
// under -race (where they reach only about 100 requests a second); the
// canary's rounds (2 requests each, at most one every 60 ms: ≤ 34 req/s)
// stay inside it.
func TestLimitRateFlood(t *testing.T) {
	c := servertest.Start(t, withLimits(func(l *admission.Limits) { l.Rate, l.Burst = 40, 400 }))
	k := startCanary(t, c)
	k.pace = 60 * time.Millisecond
	idle := k.p99(50)
	rt := h2c()
	t.Cleanup(rt.CloseIdleConnections)
	a := as(c, rt, "flooder")
	var refused, failed atomic.Int64
	var lastFailure atomic.Value
	k.during("request flood", idle, func(ctx context.Context, ready func()) {
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				// Until the canary is done (at most a minute): a loaded
				// machine may fail some requests on the way (a connection
				// that timed out), which must not end the flood early.
				for i := 0; i < 1_000_000 && ctx.Err() == nil; i++ {
					_, err := a.TryAcquire(ctx, req(&pb.TryAcquireRequest{Name: "r", LeaseId: servertest.UnknownLeaseID()}))
					switch api.CodeOf(err) {
					case api.CodeResourceExhausted:
						if refused.Add(1) >= 200 {
							ready()
						}
					case api.CodeLeaseExpired: // the unknown session: admitted, answered
					default:
						if ctx.Err() == nil {
							failed.Add(1)
							lastFailure.Store(fmt.Sprint(err))
						}
					}
				}
			})
		}
		wg.Wait()
	})
	if refused.Load() < 200 {
		t.Fatalf("%d requests refused; %d failed otherwise (last: %v)", refused.Load(), failed.Load(), lastFailure.Load())
	}
}

func TestLimitKeepAliveStreams(t *testing.T) {
	c := servertest.Start(t, withLimits(func(l *admission.Limits) { l.KeepAliveStreams, l.KeepAliveStreamsPerPrincipal = 3, 2 }))
	rt := h2c()
	t.Cleanup(rt.CloseIdleConnections)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	open := func(cl client) (func(), error) {
		st := cl.KeepAliveStream(ctx)
		if err := st.Send(&pb.KeepAliveStreamRequest{LeaseId: servertest.UnknownLeaseID()}); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		m, err := st.Receive()
		if err != nil {
			return nil, err
		}
		if m.GetErrorCode() != string(api.CodeLeaseExpired) {
			t.Fatalf("renewal of an unknown session: %v", m)
		}
		return func() { _ = st.CloseRequest(); _ = st.CloseResponse() }, nil
	}
	a, b, cc := as(c, rt, "a"), as(c, rt, "b"), as(c, rt, "c")
	closeA, err := open(a)
	mustOK(t, "a 1", err)
	_, err = open(a)
	mustOK(t, "a 2", err)
	_, err = open(a)
	wantLimit(t, "a 3", err, "keepalive-streams-per-principal")
	_, err = open(b)
	mustOK(t, "b 1", err)
	_, err = open(cc)
	wantLimit(t, "c 1 (3 open)", err, "keepalive-streams")
	closeA()
	mustOK(t, "c 1 after a closed one", servertest.Eventually(10*time.Second, func() bool {
		_, err := open(cc)
		return err == nil
	}))
}

func TestLimitSessionsPerPrincipal(t *testing.T) {
	c := servertest.Start(t, withLimits(func(l *admission.Limits) { l.SessionsPerPrincipal = 3 }))
	rt := h2c()
	t.Cleanup(rt.CloseIdleConnections)
	a := as(c, rt, "a")
	var ids []string
	for range 3 {
		ids = append(ids, newSession(t, a, 10000, "a").GetLeaseId())
	}
	_, err := a.CreateSession(ctxT(t), req(&pb.CreateSessionRequest{TtlMs: 10000}))
	wantLimit(t, "4th session of a", err, "sessions-per-principal")
	newSession(t, as(c, rt, "b"), 10000, "b")
	_, err = a.CloseSession(ctxT(t), req(&pb.CloseSessionRequest{LeaseId: ids[0]}))
	mustOK(t, "close", err)
	newSession(t, a, 10000, "a again")
}

// TestLimitKVFlood fills a small state quota with 64 KiB values while the
// canary runs.
func TestLimitKVFlood(t *testing.T) {
	c := servertest.Start(t, servertest.Options{Configure: func(cfg *server.Config) { cfg.Raft.Limits.MaxStateBytes = 8 << 20 }})
	k := startCanary(t, c)
	idle := k.p99(100)
	rt := h2c()
	t.Cleanup(rt.CloseIdleConnections)
	a := as(c, rt, "flooder")
	s := newSession(t, a, 10000, "flooder")
	tok := acquire(t, a, "kv-flood", s.GetLeaseId()).GetToken()
	var full atomic.Bool
	k.during("64 KiB KV flood", idle, func(ctx context.Context, ready func()) {
		for i := 0; i < 1000 && ctx.Err() == nil; i++ {
			_, err := a.KvPut(ctx, req(&pb.KvPutRequest{Key: fmt.Sprint("flood/", i), Value: make([]byte, 64<<10), Token: tok}))
			if api.CodeOf(err) == api.CodeResourceExhausted {
				full.Store(true)
				ready()
				break
			}
		}
		<-ctx.Done()
	})
	if !full.Load() {
		t.Fatal("the KV flood never met the state quota")
	}
}

// TestLimitStreamMessage: a KeepAliveStream message larger than the
// request limit ends the stream with resource-exhausted; the stream's
// smaller messages before it were answered.
func TestLimitStreamMessage(t *testing.T) {
	c := servertest.Start(t, servertest.Options{})
	st := c.Client.KeepAliveStream(ctxT(t))
	defer func() { _ = st.CloseRequest(); _ = st.CloseResponse() }()
	mustOK(t, "send", st.Send(&pb.KeepAliveStreamRequest{LeaseId: servertest.UnknownLeaseID()}))
	m, err := st.Receive()
	mustOK(t, "receive", err)
	if m.GetErrorCode() != string(api.CodeLeaseExpired) {
		t.Fatalf("renewal of an unknown session: %v", m)
	}
	if err := st.Send(&pb.KeepAliveStreamRequest{LeaseId: strings.Repeat("a", 2<<20)}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("send: %v", err)
	}
	_, err = st.Receive()
	wantLimit(t, "a 2 MiB stream message", err, "request-bytes")
}

// TestLimitIdleTimeout: a keep-alive connection with no request in flight
// is closed after the idle timeout.
func TestLimitIdleTimeout(t *testing.T) {
	c := servertest.Start(t, withLimits(func(l *admission.Limits) { l.IdleTimeout = 300 * time.Millisecond }))
	conn, err := net.Dial("tcp", c.Addr)
	mustOK(t, "dial", err)
	defer conn.Close()
	_, err = io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	mustOK(t, "write", err)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	mustOK(t, "read response", err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Close {
		t.Fatal("the server closed a keep-alive connection at once")
	}
	closed := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, br); closed <- err }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("an idle keep-alive connection is still open after 10 s")
	}
}
