// Package gateway is the fencing gateway: an HTTP reverse proxy that is the sole admission
// point of an upstream service that cannot check fencing tokens itself (seed 004).
//
//	client ── Fencing-Token, Fencing-Key ──▶ gateway ──(admitted only)──▶ upstream (checks nothing)
//	                                            │
//	                                            └─ bbolt file: last accepted token per key (fsync'd)
//
// Every write request carries a token (the Fencing-Token header, a decimal uint64 > 0) and a
// resource key (the Fencing-Key header, or the URL path). For each key the gateway:
//
//   - serializes requests: one request per key is in flight to the upstream at a time, the
//     per-key lock spanning the whole upstream exchange;
//   - refuses a stale token (t < last, or t <= last in strict mode) with 409 and
//     {"error":{"code":"stale-token","message":...,"key":K,"token":T,"last_token":L}}
//     without contacting the upstream;
//   - refuses a missing or malformed token or key with 400 {"error":{"code":"invalid-argument"}};
//   - with Config.Settle, refuses every request for a key (503, Retry-After) for Settle
//     after an exchange for it ended without a complete answer, and every key for Settle
//     after start: the upstream may still apply the older request;
//   - records the token of everything else — fsync'd to the bbolt file — and then forwards
//     it. Recording before forwarding (admission = advance) keeps the fence ahead of every
//     effect: an upstream that applied a request and then answered 5xx, timed out or dropped
//     the connection cannot let an older token through afterwards. In strict mode this is
//     "one effect per token": a retry with the same token is refused.
//
// Config.Record = RecordUnless4xx instead records after the upstream answers, unless it
// answered 4xx: only for strict-mode upstreams whose 4xx is a definite refusal that applied
// nothing. A 5xx, a timeout and a failed exchange record the token under both policies.
//
// GET, HEAD and OPTIONS pass without a token unless Config.FenceReads is set. The fencing
// headers are forwarded to the upstream unchanged (it may log them, or learn to check them
// later). Connection upgrades (WebSocket) of fenced requests are refused under RecordUnless4xx;
// under RecordBefore the key stays locked for the whole upgraded connection.
//
// The guarantee holds only while every request that can change the upstream goes through ONE
// gateway process: the upstream must not be reachable around it, and the bbolt file is
// locked against a second gateway. The admission logic is fence.Middleware over a
// fence.Admitter with a boltfence.Store; this package adds configuration, the proxy
// and the server lifecycle.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/boltfence"
	"github.com/leasehold/leasehold/sequencer"
)

// Record policies for Config.Record.
const (
	RecordBefore    = "before"     // fence.RecordBefore
	RecordUnless4xx = "unless-4xx" // fence.RecordUnless4xx
)

// Key sources for Config.KeyFrom.
const (
	KeyFromHeader = "header" // the key is the value of Config.KeyHeader
	KeyFromPath   = "path"   // the key is the cleaned URL path (fence.KeyFromPath)
)

// Config configures a Gateway. Start from DefaultConfig.
type Config struct {
	// Listen is the address ListenAndServe listens on.
	Listen string
	// Upstream is the base URL (http or https) of the protected service. Required.
	Upstream string
	// KeyFrom is KeyFromHeader or KeyFromPath.
	KeyFrom string
	// KeyHeader names the header carrying the key when KeyFrom is KeyFromHeader.
	KeyHeader string
	// TokenHeader names the header carrying the token.
	TokenHeader string
	// DataFile is the bbolt file holding the last accepted token per key.
	DataFile string
	// Strict accepts a token only if it is greater than the last one (one effect per token);
	// by default an equal token is accepted too.
	Strict bool
	// FenceReads makes GET, HEAD and OPTIONS carry a token and pass the check too.
	FenceReads bool
	// Record is RecordBefore (record the token, then forward; the default) or
	// RecordUnless4xx (see fence.RecordUnless4xx).
	Record string
	// LockTimeout bounds how long a request waits while another request for its key is in
	// flight; then it gets 503 with Retry-After. At least 1 ms.
	LockTimeout time.Duration
	// UpstreamTimeout bounds one whole upstream exchange (headers and body); 0 means none.
	// Since the key stays locked meanwhile, keep it finite.
	UpstreamTimeout time.Duration
	// Settle is the longest the upstream may keep working on a request after the gateway
	// gave up on it: at least the upstream's own request timeout. After an exchange that
	// ended without a complete answer (UpstreamTimeout, a broken connection, a client that
	// left), the key is refused (503 unavailable, Retry-After) for Settle after the
	// gateway closed its side, so no newer token is forwarded while the older request may
	// still land; and every key is refused for Settle after the gateway starts, for the
	// requests a previous gateway process was forwarding when it died. 0 turns this off:
	// then an upstream that goes on after the gateway gave up can apply an older token's
	// write after a newer one's.
	Settle time.Duration
	// MaxKeys bounds the keys in the token file; a request for a new key beyond it gets 507
	// resource-exhausted (known keys keep working). Drop idle keys through the admin
	// endpoint. At least 1.
	MaxKeys int
	// AdminListen is where ListenAndServe serves AdminHandler (/healthz, /metrics,
	// /admin/drop-idle); "" serves no admin endpoint.
	AdminListen string
	// AdminToken is the bearer token (Authorization: Bearer TOKEN) that the admin
	// endpoint's actions (POST /admin/...) require, at least MinAdminTokenLen bytes; ""
	// refuses them all with 403 permission-denied. /healthz and /metrics need none.
	AdminToken string
	// ShutdownTimeout bounds how long Serve waits for in-flight requests after its context
	// ends.
	ShutdownTimeout time.Duration
	// Logger receives rejections and failures. Nil discards.
	Logger *slog.Logger
	// Transport makes the upstream requests. Nil uses a clone of http.DefaultTransport.
	Transport http.RoundTripper
	// Sequencers, when set, puts the gateway in verifying mode (verify.go).
	Sequencers *SequencerConfig
	// TokenCounter, when set, refuses tokens above the cluster's issued counter (counter.go).
	TokenCounter *TokenCounterConfig
}

// Defaults.
const (
	DefaultListen          = "127.0.0.1:7421"
	DefaultDataFile        = "leasehold-gateway.db"
	DefaultLockTimeout     = 30 * time.Second
	DefaultUpstreamTimeout = 60 * time.Second
	DefaultShutdownTimeout = 10 * time.Second
	DefaultAdminListen     = "127.0.0.1:7422"
	DefaultMaxKeys         = boltfence.DefaultMaxKeys
)

// DefaultConfig returns a Config with every field but Upstream set.
func DefaultConfig() Config {
	return Config{
		Listen:          DefaultListen,
		KeyFrom:         KeyFromHeader,
		Record:          RecordBefore,
		KeyHeader:       fence.DefaultKeyHeader,
		TokenHeader:     fence.DefaultTokenHeader,
		DataFile:        DefaultDataFile,
		LockTimeout:     DefaultLockTimeout,
		UpstreamTimeout: DefaultUpstreamTimeout,
		ShutdownTimeout: DefaultShutdownTimeout,
		MaxKeys:         DefaultMaxKeys,
		AdminListen:     DefaultAdminListen,
	}
}

// Validate reports the first invalid field, wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	u, err := url.Parse(c.Upstream)
	switch {
	case c.Upstream == "":
		return bad("upstream URL is required")
	case err != nil:
		return bad("upstream: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("upstream %q: scheme must be http or https", c.Upstream)
	case u.Host == "":
		return bad("upstream %q: no host", c.Upstream)
	}
	switch c.KeyFrom {
	case KeyFromHeader:
		if !validHeaderName(c.KeyHeader) {
			return bad("key header %q is not a valid header name", c.KeyHeader)
		}
	case KeyFromPath:
	default:
		return bad("key-from %q: want %q or %q", c.KeyFrom, KeyFromHeader, KeyFromPath)
	}
	if c.Record != RecordBefore && c.Record != RecordUnless4xx {
		return bad("record %q: want %q or %q", c.Record, RecordBefore, RecordUnless4xx)
	}
	if !validHeaderName(c.TokenHeader) {
		return bad("token header %q is not a valid header name", c.TokenHeader)
	}
	if c.KeyFrom == KeyFromHeader && strings.EqualFold(c.KeyHeader, c.TokenHeader) {
		return bad("key header and token header are both %q", c.KeyHeader)
	}
	if c.DataFile == "" {
		return bad("data file is required")
	}
	if c.LockTimeout < time.Millisecond {
		return bad("lock timeout %v is below 1ms", c.LockTimeout)
	}
	if c.UpstreamTimeout < 0 {
		return bad("upstream timeout %v is negative", c.UpstreamTimeout)
	}
	if c.Settle < 0 {
		return bad("settle time %v is negative", c.Settle)
	}
	if c.MaxKeys < 1 {
		return bad("max keys %d is below 1", c.MaxKeys)
	}
	if c.ShutdownTimeout < 0 {
		return bad("shutdown timeout %v is negative", c.ShutdownTimeout)
	}
	if c.AdminToken != "" && len(c.AdminToken) < MinAdminTokenLen {
		return bad("admin token is %d bytes; want at least %d (e.g. openssl rand -hex 32)", len(c.AdminToken), MinAdminTokenLen)
	}
	if err := c.TokenCounter.validate(); err != nil {
		return err
	}
	return c.Sequencers.validate()
}

// validHeaderName reports whether s is a non-empty RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
		if !ok {
			return false
		}
	}
	return true
}

// Gateway is a fencing reverse proxy. Create it with New, serve Handler (or call Serve /
// ListenAndServe), and Close it.
type Gateway struct {
	cfg      Config
	log      *slog.Logger
	store    *boltfence.Store
	admitter *fence.Admitter
	verifier *sequencer.Verifier // verifying mode; nil when off
	handler  http.Handler
	counts   statusCounts

	// mu is held shared by every request for its whole duration and exclusively by Close,
	// so Close waits for in-flight requests before closing the token store.
	mu     sync.RWMutex
	closed bool // protected by mu

	closeOnce sync.Once
	closeErr  error
}

// New validates cfg, opens (or creates) the token file and builds the proxy.
func New(cfg Config) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	upstream, _ := url.Parse(cfg.Upstream) // validated above
	transport := cfg.Transport
	if transport == nil {
		transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	seqOpts, verifier, err := sequencerOptions(cfg.Sequencers)
	if err != nil {
		return nil, err
	}
	store, err := boltfence.Open(cfg.DataFile, time.Second)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	mode := fence.Monotonic
	if cfg.Strict {
		mode = fence.Strict
	}
	store.SetMaxKeys(cfg.MaxKeys)
	g := &Gateway{cfg: cfg, log: log, store: store, admitter: fence.NewAdmitter(store, fence.WithMode(mode)),
		counts: statusCounts{n: map[int]uint64{}}, verifier: verifier}

	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.SetXForwarded()
		},
		Transport: transport,
		ErrorLog:  slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// The upstream may have the request and go on with it: its outcome is unknown.
			fence.MarkUnsettled(r.Context())
			log.Warn("gateway: upstream failed", "method", r.Method, "path", r.URL.Path, "err", err)
			fence.WriteHTTPError(w, http.StatusBadGateway, fence.HTTPError{
				Code: fence.CodeUnavailable, Message: "gateway: upstream: " + err.Error(),
			})
		},
	}
	var upstreamHandler http.Handler = proxy
	if cfg.UpstreamTimeout > 0 {
		upstreamHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), cfg.UpstreamTimeout)
			defer cancel()
			proxy.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	opts := []fence.HTTPOption{
		fence.WithTokenHeader(cfg.TokenHeader),
		fence.WithFenceReads(cfg.FenceReads),
		fence.WithLockTimeout(cfg.LockTimeout),
		fence.WithLogger(log),
		fence.WithSettle(cfg.Settle),
	}
	if cfg.Record == RecordUnless4xx {
		opts = append(opts, fence.WithRecordPolicy(fence.RecordUnless4xx))
	}
	if cfg.KeyFrom == KeyFromPath {
		opts = append(opts, fence.WithKeyFromPath())
	} else {
		opts = append(opts, fence.WithKeyHeader(cfg.KeyHeader))
	}
	opts = append(opts, seqOpts...)
	fenced := g.checkCounter(newCounter(cfg.TokenCounter), fence.Middleware(g.admitter, opts...)(upstreamHandler))
	g.handler = g.counted(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.RLock()
		defer g.mu.RUnlock()
		if g.closed {
			fence.WriteHTTPError(w, http.StatusServiceUnavailable, fence.HTTPError{
				Code: fence.CodeUnavailable, Message: ErrClosed.Error(),
			})
			return
		}
		fenced.ServeHTTP(w, r)
	}))
	return g, nil
}

// Handler returns the gateway's HTTP handler. After Close it answers 503.
func (g *Gateway) Handler() http.Handler { return g.handler }

// LastToken returns the last token the gateway accepted for key (0 when none).
func (g *Gateway) LastToken(ctx context.Context, key string) (uint64, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.closed {
		return 0, ErrClosed
	}
	return g.admitter.LastToken(ctx, key)
}

// Serve answers HTTP on ln until ctx ends, then shuts the server down gracefully (at most
// ShutdownTimeout) and returns nil; it returns the server's error if serving fails first. It
// does not Close the Gateway.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	g.log.Info("gateway: serving", "addr", ln.Addr().String(), "upstream", g.cfg.Upstream,
		"key_from", g.cfg.KeyFrom, "strict", g.cfg.Strict, "fence_reads", g.cfg.FenceReads, "data", g.cfg.DataFile)
	return g.serve(ctx, ln, g.handler)
}

// ServeAdmin answers AdminHandler on ln until ctx ends, like Serve.
func (g *Gateway) ServeAdmin(ctx context.Context, ln net.Listener) error {
	g.log.Info("gateway: serving admin endpoints", "addr", ln.Addr().String())
	return g.serve(ctx, ln, g.AdminHandler())
}

func (g *Gateway) serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("gateway: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		_ = srv.Close()
		return fmt.Errorf("gateway: shutdown: %w", err)
	}
	return nil
}

// ListenAndServe listens on Config.Listen and calls Serve, and on Config.AdminListen (unless
// empty) and calls ServeAdmin, until ctx ends or either fails.
func (g *Gateway) ListenAndServe(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", g.cfg.Listen)
	if err != nil {
		return fmt.Errorf("gateway: listen: %w", err)
	}
	if g.cfg.AdminListen == "" {
		return g.Serve(ctx, ln)
	}
	aln, err := lc.Listen(ctx, "tcp", g.cfg.AdminListen)
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("gateway: listen (admin): %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var adminErr error
	wg.Go(func() {
		adminErr = g.ServeAdmin(ctx, aln)
		cancel() // an admin failure stops the gateway too
	})
	err = g.Serve(ctx, ln)
	cancel()
	wg.Wait()
	return errors.Join(err, adminErr)
}

// Close waits for in-flight requests, then closes the token file. It is idempotent; requests
// arriving afterwards get 503.
func (g *Gateway) Close() error {
	g.closeOnce.Do(func() {
		g.mu.Lock()
		g.closed = true
		g.mu.Unlock()
		g.closeErr = g.store.Close()
	})
	return g.closeErr
}
