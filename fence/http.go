package fence

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path"
	"strconv"
	"time"
)

// HTTP header names used by Middleware and the gateway.
const (
	// DefaultTokenHeader carries the decimal fencing token of a request.
	DefaultTokenHeader = "Fencing-Token"
	// DefaultKeyHeader carries the resource key of a request (when keys come from a header).
	DefaultKeyHeader = "Fencing-Key"
	// LastTokenHeader is set on a 409 stale-token answer to the key's last accepted token.
	LastTokenHeader = "Fencing-Last-Token"
)

// Error codes of the JSON error body, the same strings as the rest of leasehold.
const (
	CodeStaleToken        = "stale-token"
	CodeInvalidArgument   = "invalid-argument"
	CodeUnavailable       = "unavailable"
	CodeResourceExhausted = "resource-exhausted"
	CodeInternal          = "internal"
)

// HTTPError is the JSON error body written by Middleware and the gateway, wrapped as
// {"error": {...}}. Key, Token and LastToken are set for stale-token answers.
type HTTPError struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Key       string `json:"key,omitempty"`
	Token     uint64 `json:"token,omitempty"`
	LastToken uint64 `json:"last_token,omitempty"`
}

// HTTPErrorBody is the envelope of HTTPError on the wire.
type HTTPErrorBody struct {
	Error HTTPError `json:"error"`
}

// WriteHTTPError writes status and the JSON body {"error": e}.
func WriteHTTPError(w http.ResponseWriter, status int, e HTTPError) {
	b, _ := json.Marshal(HTTPErrorBody{Error: e}) // cannot fail: strings and integers only
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// HTTPOption configures Middleware.
type HTTPOption func(*httpOptions)

type httpOptions struct {
	tokenHeader string
	keyFunc     func(*http.Request) (string, error)
	fenceReads  bool
	lockTimeout time.Duration
	record      RecordPolicy
	logger      *slog.Logger
	seq         *sequencerOptions // verifying mode (verify.go); nil: plain tokens
	settle      *settler          // settle.go; nil: off
}

// RecordPolicy selects when Middleware records an admitted token as the key's last token.
type RecordPolicy int

const (
	// RecordBefore records the token, durably, before the request reaches the handler:
	// admission is advance. Whatever the handler then does — applies its effect and answers
	// 5xx, times out, panics, or never answers — no older token is admitted afterwards. In
	// Monotonic mode this costs nothing (the holder may reuse its token); in Strict mode it is
	// "one effect per generation": a retry with the same token is refused even when the first
	// attempt failed. This is the default.
	RecordBefore RecordPolicy = iota
	// RecordUnless4xx records the token after the handler answers, unless the answer is 4xx.
	// Use it only when a 4xx from the handler is a definite refusal that applied no effect
	// (for example a Strict-mode upstream that validates before it acts) and you want such a
	// refusal not to use up the token's generation. A 2xx, 3xx or 5xx answer, a handler that
	// answers nothing, and a panic all record the token.
	RecordUnless4xx
)

// String returns "before" or "unless-4xx".
func (p RecordPolicy) String() string {
	switch p {
	case RecordBefore:
		return "before"
	case RecordUnless4xx:
		return "unless-4xx"
	default:
		return "RecordPolicy(" + strconv.Itoa(int(p)) + ")"
	}
}

// WithTokenHeader sets the header that carries the token (default DefaultTokenHeader).
func WithTokenHeader(name string) HTTPOption {
	return func(o *httpOptions) { o.tokenHeader = http.CanonicalHeaderKey(name) }
}

// WithKeyHeader takes the resource key from the named header (default: DefaultKeyHeader).
func WithKeyHeader(name string) HTTPOption {
	return func(o *httpOptions) { o.keyFunc = KeyFromHeader(name) }
}

// WithKeyFromPath takes the resource key from the request path (see KeyFromPath).
func WithKeyFromPath() HTTPOption {
	return func(o *httpOptions) { o.keyFunc = KeyFromPath }
}

// WithKeyFunc takes the resource key from fn; an error from fn answers 400 invalid-argument.
func WithKeyFunc(fn func(*http.Request) (string, error)) HTTPOption {
	return func(o *httpOptions) { o.keyFunc = fn }
}

// WithFenceReads makes GET, HEAD and OPTIONS requests carry a token and pass the same check
// as writes (an admitted read then records its token too). By default they pass unchecked.
func WithFenceReads(on bool) HTTPOption { return func(o *httpOptions) { o.fenceReads = on } }

// WithLockTimeout bounds how long a request waits for its key while another request for the
// same key is in flight (default: only the request's context bounds it). On timeout the
// answer is 503 unavailable with Retry-After: 1.
func WithLockTimeout(d time.Duration) HTTPOption { return func(o *httpOptions) { o.lockTimeout = d } }

// WithRecordPolicy sets when an admitted token is recorded (default RecordBefore).
func WithRecordPolicy(p RecordPolicy) HTTPOption { return func(o *httpOptions) { o.record = p } }

// WithLogger sets the logger for rejections and failures (default: discard).
func WithLogger(l *slog.Logger) HTTPOption { return func(o *httpOptions) { o.logger = l } }

// KeyFromHeader returns a key function reading the single value of the named header.
func KeyFromHeader(name string) func(*http.Request) (string, error) {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		return singleHeader(r, name)
	}
}

// KeyFromPath returns path.Clean of the request's URL path ("/accounts/17/../18/" is
// "/accounts/18"), so that spellings of one path share one key. The upstream must map distinct
// cleaned paths to distinct resources, or the fence can be bypassed by a second spelling.
func KeyFromPath(r *http.Request) (string, error) {
	p := r.URL.Path
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	return path.Clean(p), nil
}

func singleHeader(r *http.Request, name string) (string, error) {
	vs := r.Header.Values(name)
	switch len(vs) {
	case 0:
		return "", fmt.Errorf("missing %s header", name)
	case 1:
		return vs[0], nil
	default:
		return "", fmt.Errorf("%d %s headers, want exactly one", len(vs), name)
	}
}

// isRead reports whether method is one that passes unfenced by default.
func isRead(method string) bool {
	return method == http.MethodGet || method == http.MethodHead || method == http.MethodOptions
}

// Middleware admits a request to next only if its token is not stale for its key, using a.
//
// The request's token comes from the Fencing-Token header (a canonical decimal uint64 > 0)
// and its key from the Fencing-Key header, the path, or a function (options). Per request:
//
//   - GET, HEAD and OPTIONS pass straight to next unless WithFenceReads(true).
//   - missing, repeated or malformed token or key: 400 {"error":{"code":"invalid-argument"}},
//     next is not called.
//   - stale token: 409 {"error":{"code":"stale-token","key":K,"token":T,"last_token":L}} and
//     the Fencing-Last-Token header; next is not called.
//   - a new key while the token store is full (ErrTooManyKeys): 507
//     {"error":{"code":"resource-exhausted"}}; next is not called.
//   - otherwise the token is recorded (RecordBefore, the default) and then next runs while
//     the Admitter holds the key's lock (requests for one key are serialized, the lock spans
//     the whole of next). Recording first means the fence never falls behind an effect: an
//     effect applied by a handler that then answered 5xx, panicked or hung still advanced
//     the key, so an older token is refused afterwards. If recording fails, the client gets
//     500 internal and next is not called.
//   - with WithSettle(d), a key whose last exchange ended with an unknown outcome
//     (MarkUnsettled) is refused with 503 unavailable and Retry-After for d after it ended,
//     and every key for d after Middleware was built (settle.go).
//   - with WithRecordPolicy(RecordUnless4xx) next runs first and the token is recorded when
//     next sends a non-4xx status (or panics, or answers nothing) — before that status
//     reaches the client. If that recording fails, the client gets 500 internal instead (the
//     effect happened; its outcome is unknown to the client) and the rest of next's body is
//     dropped.
//
// This makes check, effect and record one step only if every request that can change the
// resource passes through this one middleware instance (one process): see the package comment.
// Under RecordUnless4xx, connection hijacking (protocol upgrades) is refused for admitted
// requests.
func Middleware(a *Admitter, opts ...HTTPOption) func(http.Handler) http.Handler {
	o := httpOptions{tokenHeader: DefaultTokenHeader, keyFunc: KeyFromHeader(DefaultKeyHeader)}
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	o.settle.started()
	return func(next http.Handler) http.Handler {
		return o.withSequencers(&admitHandler{a: a, o: o, next: next})
	}
}

type admitHandler struct {
	a    *Admitter
	o    httpOptions
	next http.Handler
}

func invalid(w http.ResponseWriter, msg string) {
	WriteHTTPError(w, http.StatusBadRequest, HTTPError{Code: CodeInvalidArgument, Message: msg})
}

func (h *admitHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.o.fenceReads && isRead(r.Method) {
		h.next.ServeHTTP(w, r)
		return
	}
	raw, err := singleHeader(r, h.o.tokenHeader)
	if err != nil {
		invalid(w, "fence: "+err.Error())
		return
	}
	token, err := ParseToken(raw)
	if err != nil {
		invalid(w, err.Error())
		return
	}
	key, err := h.o.keyFunc(r)
	if err != nil {
		invalid(w, "fence: key: "+err.Error())
		return
	}
	if err := ValidateKey(key); err != nil {
		invalid(w, err.Error())
		return
	}

	lctx := r.Context()
	if h.o.lockTimeout > 0 {
		var cancel context.CancelFunc
		lctx, cancel = context.WithTimeout(lctx, h.o.lockTimeout)
		defer cancel()
	}
	ad, err := h.a.Begin(lctx, key, token)
	if err != nil {
		h.refuse(w, r, key, token, err)
		return
	}
	defer ad.Release()
	// Checked under the key's lock: a request that waited for it behind an exchange of
	// unknown outcome sees that exchange's settle time.
	if wait := h.o.settle.wait(key); wait > 0 {
		refuseUnsettled(w, key, wait)
		return
	}
	ctx, settled := h.o.settle.track(r.Context(), key)
	defer settled()
	r = r.WithContext(ctx)

	if h.o.record == RecordBefore {
		if err := ad.Commit(r.Context()); err != nil {
			h.refuse(w, r, key, token, fmt.Errorf("fence: request not forwarded: %w", err))
			return
		}
		h.next.ServeHTTP(w, r)
		return
	}
	aw := &admitWriter{ResponseWriter: w, ad: ad, ctx: r.Context(), log: h.o.logger}
	defer func() {
		if p := recover(); p != nil {
			if !aw.decided { // the effect's outcome is unknown: keep the fence ahead of it
				if err := ad.Commit(aw.ctx); err != nil {
					h.o.logger.Error("fence: handler panicked and token not recorded", "key", key, "token", token, "err", err)
				}
			}
			panic(p)
		}
	}()
	h.next.ServeHTTP(aw, r)
	aw.decide(http.StatusOK) // a handler that wrote nothing answered 200
}

func (h *admitHandler) refuse(w http.ResponseWriter, r *http.Request, key string, token uint64, err error) {
	var stale *StaleTokenError
	switch {
	case errors.As(err, &stale):
		h.o.logger.Info("fence: stale token refused", "method", r.Method, "path", r.URL.Path,
			"key", key, "token", token, "last_token", stale.LastToken)
		w.Header().Set(LastTokenHeader, strconv.FormatUint(stale.LastToken, 10))
		WriteHTTPError(w, http.StatusConflict, HTTPError{
			Code: CodeStaleToken, Message: stale.Error(),
			Key: key, Token: token, LastToken: stale.LastToken,
		})
	case errors.Is(err, ErrTooManyKeys):
		h.o.logger.Warn("fence: token store full", "key", key, "token", token, "err", err)
		WriteHTTPError(w, http.StatusInsufficientStorage, HTTPError{Code: CodeResourceExhausted, Message: err.Error()})
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		w.Header().Set("Retry-After", "1")
		WriteHTTPError(w, http.StatusServiceUnavailable, HTTPError{
			Code: CodeUnavailable, Message: "fence: timed out waiting for key " + strconv.Quote(key),
		})
	default:
		h.o.logger.Error("fence: admission failed", "key", key, "token", token, "err", err)
		WriteHTTPError(w, http.StatusInternalServerError, HTTPError{Code: CodeInternal, Message: err.Error()})
	}
}

// admitWriter records the admission's token when the handler sends a non-4xx status, before
// the status is passed on (RecordUnless4xx).
type admitWriter struct {
	http.ResponseWriter
	ad  *Admission
	ctx context.Context
	log *slog.Logger

	decided bool // a final (non-1xx) status was chosen
	failed  bool // recording failed: a 500 was sent instead, drop the handler's output
}

func (w *admitWriter) decide(code int) {
	if w.decided {
		return
	}
	w.WriteHeader(code)
}

func (w *admitWriter) WriteHeader(code int) {
	if w.decided {
		if !w.failed {
			w.ResponseWriter.WriteHeader(code) // superfluous: let net/http report it
		}
		return
	}
	if code >= 100 && code <= 199 {
		w.ResponseWriter.WriteHeader(code) // informational: the final status is still to come
		return
	}
	w.decided = true
	if code < 400 || code > 499 {
		if err := w.ad.Commit(w.ctx); err != nil {
			w.failed = true
			w.log.Error("fence: effect applied but token not recorded", "key", w.ad.Key(), "token", w.ad.Token(), "err", err)
			h := w.ResponseWriter.Header()
			for k := range h {
				delete(h, k)
			}
			WriteHTTPError(w.ResponseWriter, http.StatusInternalServerError, HTTPError{
				Code: CodeInternal, Message: "fence: outcome unknown: " + err.Error(),
			})
			return
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *admitWriter) Write(p []byte) (int, error) {
	w.decide(http.StatusOK)
	if w.failed {
		return 0, errResponseReplaced
	}
	return w.ResponseWriter.Write(p)
}

// Flush implements http.Flusher.
func (w *admitWriter) Flush() {
	w.decide(http.StatusOK)
	if w.failed {
		return
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack refuses: an admitted request's response must go through the status decision.
func (w *admitWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, errors.New("fence: hijacking a fenced request is not supported")
}

// Unwrap lets http.ResponseController reach deadlines of the underlying writer.
func (w *admitWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
