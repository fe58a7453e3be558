package httpedge

import (
	"context"
	"log/slog"
	"net/http"
	"time"
)

// Outcome is what the RPC interceptor tells the access log about one
// request: the leasehold code of its outcome.
type Outcome struct{ code string }

// Code is the code NoteCode recorded, "" when none was.
func (o *Outcome) Code() string { return o.code }

type outcomeKey struct{}

// WithOutcome returns ctx carrying a new Outcome for NoteCode to fill.
// AccessLog does this for every request; an operation of a stream, logged
// with LogStreamOp, does it itself.
func WithOutcome(ctx context.Context) (context.Context, *Outcome) {
	o := &Outcome{}
	return context.WithValue(ctx, outcomeKey{}, o), o
}

// NoteCode records the outcome code of an RPC for the access log, when the
// request is being logged.
func NoteCode(ctx context.Context, code string) {
	if o, ok := ctx.Value(outcomeKey{}).(*Outcome); ok {
		o.code = code
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

// LogStreamOp logs one INFO line for one operation of a LockStream: the
// unary procedure it stands for, its code, duration, peer and protocol,
// with "stream" naming the stream's path.
func LogStreamOp(l *slog.Logger, proc, stream, code string, d time.Duration, peer, proto string) {
	l.Info("request", "method", "STREAM", "path", proc, "stream", stream, "code", code, "duration", d, "peer", peer, "proto", proto)
}

// AccessLog logs one INFO line per finished request to l: method, path,
// HTTP status, leasehold code (RPCs, NoteCode), bytes, duration, peer,
// protocol.
func AccessLog(l *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ctx, o := WithOutcome(r.Context())
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(ctx))
		attrs := []any{
			"method", r.Method, "path", r.URL.Path, "status", sw.status,
			"bytes", sw.bytes, "duration", time.Since(start), "peer", r.RemoteAddr, "proto", r.Proto,
		}
		if o.code != "" {
			attrs = append(attrs, "code", o.code)
		}
		if ua := r.UserAgent(); ua != "" {
			attrs = append(attrs, "user_agent", ua)
		}
		l.Info("request", attrs...)
	})
}
