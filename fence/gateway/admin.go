package gateway

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/fence"
)

// MinDropIdle is the smallest age the admin endpoint drops keys at: a dropped key's fence is
// gone, so a key must be idle far longer than any lock's TTL (at most 1 h) plus any pause a
// stale holder can come back from.
const MinDropIdle = time.Hour

// statusCounts counts the gateway's answers by HTTP status, for /metrics.
type statusCounts struct {
	mu sync.Mutex // protects n
	n  map[int]uint64
}

func (c *statusCounts) add(code int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[code]++
}

func (c *statusCounts) snapshot() map[int]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[int]uint64, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// countingWriter records the status a handler answers with.
type countingWriter struct {
	http.ResponseWriter
	code int
}

func (w *countingWriter) WriteHeader(code int) {
	if w.code == 0 && code >= 200 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the underlying writer (flush, deadlines).
func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (g *Gateway) counted(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &countingWriter{ResponseWriter: w}
		defer func() {
			code := cw.code
			if code == 0 {
				code = http.StatusOK
			}
			g.counts.add(code)
		}()
		next.ServeHTTP(cw, r)
	})
}

// AdminHandler returns the gateway's own endpoints, served on Config.AdminListen by
// ListenAndServe and never forwarded to the upstream:
//
//	GET  /healthz                          200 "ok keys=N max_keys=M", or 503 once closed
//	GET  /metrics                          Prometheus text: keys, max keys, answers by status
//	POST /admin/drop-idle?older-than=DUR   drop keys whose token was last recorded more than
//	                                       DUR ago (DUR ≥ MinDropIdle); answers
//	                                       {"dropped":N,"keys":M}
//
// /healthz and /metrics have no authentication; POST /admin/... requires the bearer token
// Config.AdminToken and is refused with 403 permission-denied without it (or when the
// gateway has none). Bind it to loopback (the default) or a private network all the same.
func (g *Gateway) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		g.mu.RLock()
		defer g.mu.RUnlock()
		if g.closed {
			http.Error(w, "closed", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "ok keys=%d max_keys=%d\n", g.store.Len(), g.store.MaxKeys())
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		fmt.Fprintf(w, "# HELP leasehold_gateway_keys Keys in the gateway's token store.\n# TYPE leasehold_gateway_keys gauge\nleasehold_gateway_keys %d\n", g.store.Len())
		fmt.Fprintf(w, "# HELP leasehold_gateway_max_keys Bound on the keys in the gateway's token store.\n# TYPE leasehold_gateway_max_keys gauge\nleasehold_gateway_max_keys %d\n", g.store.MaxKeys())
		fmt.Fprint(w, "# HELP leasehold_gateway_responses_total Answers of the gateway, by HTTP status.\n# TYPE leasehold_gateway_responses_total counter\n")
		counts := g.counts.snapshot()
		codes := make([]int, 0, len(counts))
		for c := range counts {
			codes = append(codes, c)
		}
		slices.Sort(codes)
		for _, c := range codes {
			fmt.Fprintf(w, "leasehold_gateway_responses_total{code=\"%d\"} %d\n", c, counts[c])
		}
	})
	mux.HandleFunc("POST /admin/drop-idle", g.adminAction(func(w http.ResponseWriter, r *http.Request) {
		d, err := time.ParseDuration(r.URL.Query().Get("older-than"))
		if err != nil || d < MinDropIdle {
			fence.WriteHTTPError(w, http.StatusBadRequest, fence.HTTPError{Code: fence.CodeInvalidArgument,
				Message: fmt.Sprintf("gateway: older-than=%q: want a duration of at least %v", r.URL.Query().Get("older-than"), MinDropIdle)})
			return
		}
		n, err := g.DropIdle(r.Context(), d)
		if err != nil {
			fence.WriteHTTPError(w, http.StatusServiceUnavailable, fence.HTTPError{Code: fence.CodeUnavailable, Message: err.Error()})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]int{"dropped": n, "keys": g.store.Len()})
	}))
	return mux
}

// MinAdminTokenLen is the shortest Config.AdminToken accepted.
const MinAdminTokenLen = 32

// adminAction lets only a caller presenting Config.AdminToken reach next: dropping fences
// admits any token for the dropped keys, so it is not for whoever can reach the port.
func (g *Gateway) adminAction(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		switch {
		case g.cfg.AdminToken == "":
			fence.WriteHTTPError(w, http.StatusForbidden, fence.HTTPError{Code: fence.CodePermissionDenied,
				Message: "gateway: admin actions are off: start the gateway with --admin-token-file to use them"})
		case !ok || subtle.ConstantTimeCompare([]byte(tok), []byte(g.cfg.AdminToken)) != 1:
			g.log.Warn("gateway: admin action refused", "path", r.URL.Path, "remote", r.RemoteAddr)
			fence.WriteHTTPError(w, http.StatusForbidden, fence.HTTPError{Code: fence.CodePermissionDenied,
				Message: "gateway: admin actions need Authorization: Bearer <the gateway's admin token>"})
		default:
			next(w, r)
		}
	}
}

// DropIdle drops the keys whose token was last recorded more than olderThan ago (see
// boltfence.Store.DropIdle) and returns how many it dropped. olderThan must be at least
// MinDropIdle.
func (g *Gateway) DropIdle(ctx context.Context, olderThan time.Duration) (int, error) {
	if olderThan < MinDropIdle {
		return 0, fmt.Errorf("%w: drop-idle age %v is below %v", ErrInvalidConfig, olderThan, MinDropIdle)
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.closed {
		return 0, ErrClosed
	}
	n, err := g.store.DropIdle(ctx, time.Now().Add(-olderThan))
	if err == nil && n > 0 {
		g.log.Warn("gateway: dropped idle keys", "dropped", n, "older_than", olderThan.String(), "keys", strconv.Itoa(g.store.Len()))
	}
	return n, err
}
