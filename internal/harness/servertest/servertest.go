// Package servertest starts a real leasehold server for tests: a single
// node (a Raft group of one, the same code path as `leasehold serve`) on a
// t.TempDir() data dir, served on a 127.0.0.1:0 listener, with connect
// clients that reach it the way users do.
//
//	c := servertest.Start(t, servertest.Options{Clock: clk})
//	resp, err := c.Client.CreateSession(ctx, connect.NewRequest(&pb.CreateSessionRequest{TtlMs: 5000}))
//
// Start returns once the node leads and its lessor runs, so the first
// request neither races the election nor meets a "not the leader" answer.
// Everything is stopped in t.Cleanup. Raft timings are shortened (an
// election takes tens of milliseconds); the lessor keeps its production
// drift and tick, and its Grace is twice the shortened leader-lease timeout.
//
// With a *clock.Manual in Options.Clock every server-side timer (session
// expiry, lock-delay, the wait_ms of a queued Acquire) fires only when the
// test advances the clock; raft keeps real time. The lessor checks its
// deadlines on each Tick of that clock, so a test that waits for an expiry
// should advance in steps of Config().Lessor.Tick while it polls (see
// Cluster.AdvanceUntil).
package servertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/clock"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/server"
)

// Options configure Start. The zero value is a server on the real clock
// with the default limits in a new temporary dir.
type Options struct {
	// Clock is the server's clock. Nil: clock.Real{}.
	Clock clock.Clock
	// Limits bound the state machine. Zero: fsm.DefaultLimits().
	Limits fsm.Limits
	// Dir is the data dir. Empty: a new t.TempDir().
	Dir string
	// Logger receives the server's and raft's logs. Nil: Logger(t).
	Logger *slog.Logger
	// Configure, when set, edits the server's Config after the defaults
	// above are applied and before the server opens.
	Configure func(*server.Config)
}

// Cluster is one running leasehold node and clients for it. Its methods are
// meant for the test goroutine; the clients are safe for concurrent use.
type Cluster struct {
	// Addr is the API's host:port; URL is "http://" + Addr.
	Addr, URL string
	// Dir is the data dir.
	Dir string
	// Client speaks gRPC (over cleartext HTTP/2), as the Go client does.
	Client leaseholdv1connect.LeaseholdServiceClient
	// JSON speaks the Connect protocol with JSON bodies over HTTP/1.1, as a
	// curl user or a browser does.
	JSON leaseholdv1connect.LeaseholdServiceClient
	// Cluster administers membership over gRPC.
	Cluster leaseholdv1connect.ClusterServiceClient
	// HTTP is a plain HTTP/1.1 client for /metrics, /healthz and raw
	// requests.
	HTTP *http.Client

	t    testing.TB
	opts Options
	cfg  server.Config
	h2c  *http.Client

	mu      sync.Mutex // protects following
	srv     *server.Server
	cancel  context.CancelFunc
	served  chan error
	stopped bool
}

// Start opens a server as Options describe, serves it on 127.0.0.1:0 and
// waits until it leads. The server is stopped in t.Cleanup.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Limits == (fsm.Limits{}) {
		opts.Limits = fsm.DefaultLimits()
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.Logger == nil {
		opts.Logger = Logger(t)
	}
	c := &Cluster{t: t, opts: opts, Dir: opts.Dir, h2c: h2cClient(), HTTP: &http.Client{Transport: &http.Transport{}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("servertest: listen: %v", err)
	}
	c.Addr = ln.Addr().String()
	c.URL = "http://" + c.Addr
	c.Client = leaseholdv1connect.NewLeaseholdServiceClient(c.h2c, c.URL, connect.WithGRPC())
	c.JSON = leaseholdv1connect.NewLeaseholdServiceClient(c.HTTP, c.URL, connect.WithProtoJSON())
	c.Cluster = leaseholdv1connect.NewClusterServiceClient(c.h2c, c.URL, connect.WithGRPC())
	t.Cleanup(func() {
		c.Stop()
		c.h2c.CloseIdleConnections()
		c.HTTP.CloseIdleConnections()
	})
	c.cfg = c.config()
	c.open(ln)
	return c
}

// config is the server.Config Start and Restart use.
func (c *Cluster) config() server.Config {
	cfg := server.DefaultConfig(c.opts.Dir, c.Addr)
	cfg.Logger = c.opts.Logger
	cfg.Raft.Limits = c.opts.Limits
	cfg.Raft.HeartbeatTimeout = 50 * time.Millisecond
	cfg.Raft.ElectionTimeout = 50 * time.Millisecond
	cfg.Raft.LeaderLeaseTimeout = 50 * time.Millisecond
	cfg.Raft.CommitTimeout = 5 * time.Millisecond
	cfg.Lessor.Grace = 2 * cfg.Raft.LeaderLeaseTimeout
	cfg.Lessor.Clock = c.opts.Clock
	if c.opts.Configure != nil {
		c.opts.Configure(&cfg)
	}
	return cfg
}

// Config returns the configuration the server was opened with (the lessor's
// Drift, Grace and Tick, the limits).
func (c *Cluster) Config() server.Config { return c.cfg }

// Server returns the running server (its Node gives access to the applied
// state for assertions).
func (c *Cluster) Server() *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.srv
}

func (c *Cluster) open(ln net.Listener) {
	c.t.Helper()
	srv, err := server.Open(c.cfg)
	if err != nil {
		_ = ln.Close()
		c.t.Fatalf("servertest: open: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	c.mu.Lock()
	c.srv, c.cancel, c.served, c.stopped = srv, cancel, served, false
	c.mu.Unlock()
	c.waitReady(srv)
}

// waitReady waits until the node leads, its lessor runs (a KeepAlive of an
// unknown session is answered lease-expired rather than not-leader) and
// its API address is registered, so the state is quiet.
func (c *Cluster) waitReady(srv *server.Server) {
	c.t.Helper()
	probe := connect.NewRequest(&pb.KeepAliveRequest{LeaseId: UnknownLeaseID()})
	var last error
	err := Eventually(10*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, last = c.Client.KeepAlive(ctx, probe)
		if api.CodeOf(last) != api.CodeLeaseExpired {
			return false
		}
		var addr string
		srv.Node().Read(func(m *fsm.Machine) { addr = m.NodeAPIAddr(srv.Node().ID()) })
		return addr == c.Addr
	})
	if err != nil {
		c.t.Fatalf("servertest: server not ready: %v (last probe: %v)", err, last)
	}
}

// Stop stops serving and closes the server. It is idempotent. Calls still
// blocked in the server (a queued Acquire, a Watch) delay it by up to the
// server's graceful-shutdown timeout; cancel them first.
func (c *Cluster) Stop() {
	c.mu.Lock()
	if c.stopped || c.srv == nil {
		c.mu.Unlock()
		return
	}
	c.stopped = true
	srv, cancel, served := c.srv, c.cancel, c.served
	c.mu.Unlock()
	// Close the clients' idle connections first: an HTTP/2 server's graceful
	// shutdown otherwise waits up to a second for them to go away.
	c.h2c.CloseIdleConnections()
	c.HTTP.CloseIdleConnections()
	cancel()
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		c.t.Errorf("servertest: serve: %v", err)
	}
	if err := srv.Close(); err != nil {
		c.t.Errorf("servertest: close: %v", err)
	}
	c.h2c.CloseIdleConnections()
	c.HTTP.CloseIdleConnections()
}

// Restart stops the server and opens a new one on the same data dir and
// address, as a process restart would, and waits until it leads. The
// clients keep working.
func (c *Cluster) Restart() {
	c.t.Helper()
	c.Stop()
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		c.t.Fatalf("servertest: listen again on %s: %v", c.Addr, err)
	}
	c.open(ln)
}

// Manual returns the server's clock as a *clock.Manual, failing the test
// when Options.Clock was something else.
func (c *Cluster) Manual() *clock.Manual {
	c.t.Helper()
	m, ok := c.opts.Clock.(*clock.Manual)
	if !ok {
		c.t.Fatalf("servertest: the clock is %T, not *clock.Manual", c.opts.Clock)
	}
	return m
}

// AdvanceUntil advances the manual clock by one lessor tick at a time
// until cond holds, and fails the test if it does not within 10 s of real
// time. It returns how far the clock moved. Use it to wait for an expiry
// or the end of a lock-delay: the lessor may see each step a little late,
// which can only make an expiry later, never earlier.
func (c *Cluster) AdvanceUntil(what string, cond func() bool) time.Duration {
	c.t.Helper()
	m := c.Manual()
	start := m.Now()
	err := Eventually(10*time.Second, func() bool {
		if cond() {
			return true
		}
		m.Advance(c.cfg.Lessor.Tick)
		return false
	})
	if err != nil {
		c.t.Fatalf("servertest: %s: %v (clock advanced %v)", what, err, m.Now().Sub(start))
	}
	return m.Now().Sub(start)
}

// State returns the applied state machine's snapshot: deterministic bytes
// that are equal exactly when two states are, for "nothing changed" checks.
func (c *Cluster) State() []byte {
	c.t.Helper()
	var (
		data []byte
		err  error
	)
	c.Server().Node().Read(func(m *fsm.Machine) { data, err = m.Snapshot() })
	if err != nil {
		c.t.Fatalf("servertest: snapshot: %v", err)
	}
	return data
}

// Eventually polls cond every 2 ms until it returns true, or returns an
// error after timeout.
func Eventually(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("condition not met within %v", timeout)
		}
		<-tick.C
	}
	return nil
}

// UnknownLeaseID returns a well-formed lease id that no server issued.
func UnknownLeaseID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Logger returns a logger that writes to t.Log while the test runs and
// drops lines after it ends (raft may log while shutting down).
func Logger(t testing.TB) *slog.Logger {
	w := &tWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, nil))
}

type tWriter struct {
	t    testing.TB
	mu   sync.Mutex // protects following
	done bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(bytes.TrimRight(p, "\n")))
	}
	return len(p), nil
}

// h2cClient speaks cleartext HTTP/2 with prior knowledge, as gRPC needs.
func h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

// Metric reads the value of the unlabelled metric name from the /metrics of
// the server at addr (host:port, cleartext), failing t when it cannot.
func Metric(t testing.TB, addr, name string) float64 {
	t.Helper()
	v, err := ReadMetric(context.Background(), addr, name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// ReadMetric reads the value of the unlabelled metric name from the
// /metrics of the server at addr (host:port, cleartext), waiting at most a
// second for the answer.
func ReadMetric(ctx context.Context, addr, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	res, err := (&http.Client{Timeout: time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("servertest: no %s in the /metrics of %s", name, addr)
}

// ProcessCPU is the user and system CPU time this process has used: for a
// benchmark's CPU per operation (server and client together, when both
// run in the test's process).
func ProcessCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
