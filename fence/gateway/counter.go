package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/fence"
)

// TokenCounterConfig makes the gateway refuse bare tokens the cluster never issued, without
// signatures: a token above the cluster's newest issued token (leasehold's GET
// /v1/token-counter, a linearizable read) is refused with 403 permission-denied before it is
// compared or recorded, so one request with token 2^64−1 cannot brick a key. The counter is
// cached; a token above the cache makes the gateway fetch it again (requests share one fetch,
// at most one per MinRefresh). When the cluster cannot be asked, such a request gets 503
// unavailable: the gateway fails closed. Tokens at or below the cache cost nothing.
//
// This bounds forgery, it does not stop it: a forger can still send the newest issued token,
// fencing out that token's holder only until the next grant. Signed sequencers
// (SequencerConfig) stop it.
type TokenCounterConfig struct {
	// Endpoint is the base URL (http or https) of a leasehold node's API. Required.
	Endpoint string
	// MinRefresh is the least time between two fetches (default DefaultMinRefresh).
	MinRefresh time.Duration
	// Timeout bounds one fetch (default DefaultCounterTimeout).
	Timeout time.Duration
	// Transport makes the fetches (TLS: set its TLSClientConfig). Nil uses a clone of
	// http.DefaultTransport.
	Transport http.RoundTripper
}

// Token counter defaults.
const (
	DefaultMinRefresh     = 100 * time.Millisecond
	DefaultCounterTimeout = 2 * time.Second
	// tokenCounterPath is leasehold's endpoint (internal/httpedge.TokenCounterPath).
	tokenCounterPath = "/v1/token-counter"
)

func (c *TokenCounterConfig) validate() error {
	if c == nil {
		return nil
	}
	u, err := url.Parse(c.Endpoint)
	switch {
	case c.Endpoint == "":
		return fmt.Errorf("%w: token counter: endpoint is required", ErrInvalidConfig)
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("%w: token counter: endpoint %q is not an http(s) URL", ErrInvalidConfig, c.Endpoint)
	case c.MinRefresh < 0 || c.Timeout < 0:
		return fmt.Errorf("%w: token counter: negative duration", ErrInvalidConfig)
	}
	return nil
}

// counter is the cached token counter of one cluster.
type counter struct {
	url        string
	hc         *http.Client
	minRefresh time.Duration
	timeout    time.Duration

	known atomic.Uint64 // the newest token the cluster is known to have issued

	// sem is held (a token in it) by the one request fetching; others wait for it and reuse
	// its answer.
	sem       chan struct{}
	lastFetch time.Time // start of the last fetch; guarded by sem
}

func newCounter(c *TokenCounterConfig) *counter {
	if c == nil {
		return nil
	}
	tr := c.Transport
	if tr == nil {
		tr = http.DefaultTransport.(*http.Transport).Clone()
	}
	n := &counter{url: c.Endpoint + tokenCounterPath, hc: &http.Client{Transport: tr},
		minRefresh: c.MinRefresh, timeout: c.Timeout, sem: make(chan struct{}, 1)}
	if n.minRefresh == 0 {
		n.minRefresh = DefaultMinRefresh
	}
	if n.timeout == 0 {
		n.timeout = DefaultCounterTimeout
	}
	return n
}

// check returns nil if token is at most the cluster's newest issued token, errTokenNotIssued
// (a *notIssuedError) if it is above it, or the fetch's error.
func (c *counter) check(ctx context.Context, token uint64) error {
	if token <= c.known.Load() {
		return nil
	}
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-c.sem }()
	if token <= c.known.Load() { // another request fetched meanwhile
		return nil
	}
	if wait := time.Until(c.lastFetch.Add(c.minRefresh)); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	c.lastFetch = time.Now()
	n, err := c.fetch(ctx)
	if err != nil {
		return err
	}
	for old := c.known.Load(); n > old && !c.known.CompareAndSwap(old, n); old = c.known.Load() {
	}
	if known := c.known.Load(); token > known {
		return &notIssuedError{token: token, newest: known}
	}
	return nil
}

func (c *counter) fetch(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return 0, fmt.Errorf("gateway: token counter: %w", err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("gateway: token counter: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return 0, fmt.Errorf("gateway: token counter: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("gateway: token counter: %s: %s", resp.Status, body)
	}
	var v struct {
		Token uint64 `json:"token"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return 0, fmt.Errorf("gateway: token counter: %q: %w", body, err)
	}
	return v.Token, nil
}

// notIssuedError is a token above the cluster's newest issued token.
type notIssuedError struct{ token, newest uint64 }

func (e *notIssuedError) Error() string {
	return fmt.Sprintf("gateway: token %d was never issued: the cluster's newest token is %d", e.token, e.newest)
}

// checkCounter wraps next so that a fenced request's token is checked against the counter
// first. Requests without a valid token pass to next, which refuses them.
func (g *Gateway) checkCounter(c *counter, next http.Handler) http.Handler {
	if c == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.cfg.FenceReads && (r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions) {
			next.ServeHTTP(w, r)
			return
		}
		vs := r.Header.Values(g.cfg.TokenHeader)
		if len(vs) != 1 {
			next.ServeHTTP(w, r)
			return
		}
		token, err := fence.ParseToken(vs[0])
		if err != nil {
			next.ServeHTTP(w, r)
			return
		}
		switch err := c.check(r.Context(), token); err.(type) {
		case nil:
			next.ServeHTTP(w, r)
		case *notIssuedError:
			g.log.Warn("gateway: token above the cluster's counter refused", "method", r.Method, "path", r.URL.Path, "err", err)
			fence.WriteHTTPError(w, http.StatusForbidden, fence.HTTPError{Code: fence.CodePermissionDenied, Message: err.Error(), Token: token})
		default:
			g.log.Warn("gateway: token counter unavailable", "err", err)
			w.Header().Set("Retry-After", "1")
			fence.WriteHTTPError(w, http.StatusServiceUnavailable, fence.HTTPError{Code: fence.CodeUnavailable, Message: err.Error()})
		}
	})
}
