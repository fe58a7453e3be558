package server

import (
	"context"
	"log/slog"
	"net/http"
	"time"
)

// accessInfo is what the RPC interceptor tells the access log about one
// request: the leasehold code of its outcome.
type accessInfo struct{ code string }

type accessKey struct{}

// noteCode records the outcome code of an RPC for the access log, when the
// request is being logged.
func noteCode(ctx context.Context, code string) {
	if ai, ok := ctx.Value(accessKey{}).(*accessInfo); ok {
		ai.code = code
	}
}

// statusWriter remembers the status and the bytes of a response.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

// Flush is needed by streaming RPCs (connect requires an http.Flusher).
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		if w.status == 0 {
			w.status = http.StatusOK
		}
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach deadlines and the rest.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// logStreamOp logs one INFO line for one operation of a LockStream
// (lockstream.go): the unary procedure it stands for, its code, duration,
// peer and protocol, with "stream" naming the stream's path.
func logStreamOp(l *slog.Logger, proc, stream, code string, d time.Duration, peer, proto string) {
	l.Info("request", "method", "STREAM", "path", proc, "stream", stream, "code", code, "duration", d, "peer", peer, "proto", proto)
}

// accessLog logs one INFO line per finished request to l: method, path,
// HTTP status, leasehold code (RPCs), bytes, duration, peer, protocol.
func accessLog(l *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ai := &accessInfo{}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), accessKey{}, ai)))
		attrs := []any{
			"method", r.Method, "path", r.URL.Path, "status", sw.status,
			"bytes", sw.bytes, "duration", time.Since(start), "peer", r.RemoteAddr, "proto", r.Proto,
		}
		if ai.code != "" {
			attrs = append(attrs, "code", ai.code)
		}
		if ua := r.UserAgent(); ua != "" {
			attrs = append(attrs, "user_agent", ua)
		}
		l.Info("request", attrs...)
	})
}
