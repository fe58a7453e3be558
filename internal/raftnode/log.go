package raftnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// LogRepeatInterval is how often one repeated raft warning or error about
// the same peer (a dead peer fails every heartbeat) is logged; the lines in
// between are counted and the next one carries "suppressed"=N.
const LogRepeatInterval = 10 * time.Second

// hclogAdapter is raft's hclog.Logger writing to a slog.Logger: one record
// per line, raft's level mapped to slog's (TRACE below DEBUG, ERROR stays
// ERROR), slog's timestamp only, and repeated per-peer failures
// rate-limited.
type hclogAdapter struct {
	l       *slog.Logger
	name    string
	implied []any
	limit   *repeatLimiter
	// stopping is shared by every logger derived from one newHCLogger:
	// set once the node shuts down (Node.Stopping).
	stopping *atomic.Bool
}

// newHCLogger returns raft's logger over l, named "raft".
func newHCLogger(l *slog.Logger) *hclogAdapter {
	return &hclogAdapter{l: l, name: "raft", limit: newRepeatLimiter(LogRepeatInterval, time.Now), stopping: new(atomic.Bool)}
}

// LevelTrace is the slog level raft's TRACE lines get.
const LevelTrace = slog.LevelDebug - 4

func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return LevelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	lvl := slogLevel(level)
	if lvl == slog.LevelWarn && normalStart(msg, args) {
		lvl = slog.LevelInfo
	}
	if lvl == slog.LevelError && connectionEnded(msg, args) {
		lvl = slog.LevelDebug
	}
	if lvl >= slog.LevelWarn && a.stopping.Load() {
		// A cluster stopping as a whole: its peers going away is expected.
		lvl = slog.LevelInfo
	}
	ctx := context.Background()
	if !a.l.Enabled(ctx, lvl) {
		return
	}
	if lvl >= slog.LevelWarn {
		ok, suppressed := a.limit.allow(msg + "\x00" + peerOf(args))
		if !ok {
			return
		}
		if suppressed > 0 {
			args = append(args, "suppressed", suppressed)
		}
	}
	attrs := make([]any, 0, 2+len(a.implied)+len(args))
	attrs = append(attrs, "component", a.name)
	attrs = append(attrs, a.implied...)
	for _, v := range args {
		attrs = append(attrs, hclogValue(v))
	}
	a.l.Log(ctx, lvl, msg, attrs...)
}

// hclogValue renders hclog's formatting wrappers (hclog.Fmt) as hclog would.
func hclogValue(v any) any {
	if f, ok := v.(hclog.Format); ok && len(f) > 0 {
		if format, ok := f[0].(string); ok {
			return fmt.Sprintf(format, f[1:]...)
		}
	}
	return v
}

// normalStart reports a warning that every node logs on a normal start:
// the first election, before any leader was known.
func normalStart(msg string, args []any) bool {
	if msg != "heartbeat timeout reached, starting election" {
		return false
	}
	for i := 0; i+1 < len(args); i += 2 {
		if args[i] == "last-leader-id" {
			return fmt.Sprint(args[i+1]) == ""
		}
	}
	return false
}

// connectionEnded reports raft's complaint about an incoming connection
// that simply ended — a bootstrap probe that was answered, a peer that
// closed its connection, a node shutting down — which every normal start
// and stop produce: not an error. A connection that sent garbage stays one.
func connectionEnded(msg string, args []any) bool {
	if msg != "failed to decode incoming command" {
		return false
	}
	for i := 0; i+1 < len(args); i += 2 {
		if args[i] != "error" {
			continue
		}
		err, ok := args[i+1].(error)
		return ok && (errors.Is(err, errProbed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
			errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET))
	}
	return false
}

// peerOf returns the peer a raft line is about ("" when none).
func peerOf(args []any) string {
	for i := 0; i+1 < len(args); i += 2 {
		switch args[i] {
		case "peer", "server-id", "target":
			return fmt.Sprint(args[i+1])
		}
	}
	return ""
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

func (a *hclogAdapter) enabled(level hclog.Level) bool {
	return a.l.Enabled(context.Background(), slogLevel(level))
}

func (a *hclogAdapter) IsTrace() bool { return a.enabled(hclog.Trace) }
func (a *hclogAdapter) IsDebug() bool { return a.enabled(hclog.Debug) }
func (a *hclogAdapter) IsInfo() bool  { return a.enabled(hclog.Info) }
func (a *hclogAdapter) IsWarn() bool  { return a.enabled(hclog.Warn) }
func (a *hclogAdapter) IsError() bool { return a.enabled(hclog.Error) }

func (a *hclogAdapter) ImpliedArgs() []any { return a.implied }

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	b := *a
	b.implied = append(append([]any(nil), a.implied...), args...)
	return &b
}

func (a *hclogAdapter) Name() string { return a.name }

func (a *hclogAdapter) Named(name string) hclog.Logger {
	b := *a
	b.name = a.name + "." + name
	return &b
}

func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	b := *a
	b.name = name
	return &b
}

// SetLevel does nothing: the slog handler's level decides.
func (a *hclogAdapter) SetLevel(hclog.Level) {}

func (a *hclogAdapter) GetLevel() hclog.Level {
	for _, lv := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn} {
		if a.enabled(lv) {
			return lv
		}
	}
	return hclog.Error
}

func (a *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(opts), "", 0)
}

func (a *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return stdWriter{a}
}

// stdWriter logs each line written by a standard library logger at INFO.
type stdWriter struct{ a *hclogAdapter }

func (w stdWriter) Write(p []byte) (int, error) {
	w.a.Info(strings.TrimRight(string(p), "\r\n"))
	return len(p), nil
}

// repeatLimiter lets one line per key through each interval and counts the
// rest.
type repeatLimiter struct {
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex // protects following
	seen map[string]*repeat
}

type repeat struct {
	last       time.Time
	suppressed int
}

// maxRepeatKeys bounds the limiter's memory; past it, old keys are dropped.
const maxRepeatKeys = 1024

func newRepeatLimiter(every time.Duration, now func() time.Time) *repeatLimiter {
	return &repeatLimiter{every: every, now: now, seen: map[string]*repeat{}}
}

// allow reports whether a line with key may be logged now and, if so, how
// many were suppressed since the last one.
func (r *repeatLimiter) allow(key string) (ok bool, suppressed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	e := r.seen[key]
	if e == nil {
		if len(r.seen) >= maxRepeatKeys {
			for k, v := range r.seen {
				if now.Sub(v.last) >= r.every {
					delete(r.seen, k)
				}
			}
		}
		r.seen[key] = &repeat{last: now}
		return true, 0
	}
	if now.Sub(e.last) < r.every {
		e.suppressed++
		return false, 0
	}
	suppressed, e.suppressed, e.last = e.suppressed, 0, now
	return true, suppressed
}
