package main

import (
	"io"
	"log/slog"
	"strings"

	"github.com/leasehold/leasehold/internal/raftnode"
)

// newLogger returns the server's logger: format text or json, level
// trace, debug, info, warn or error (raft's TRACE lines show only at trace).
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if strings.EqualFold(level, "trace") {
		lv = raftnode.LevelTrace
	} else if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usageErr("--log-level: %v (want trace, debug, info, warn or error)", err)
	}
	opts := &slog.HandlerOptions{Level: lv, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.LevelKey && a.Value.Any() == raftnode.LevelTrace {
			a.Value = slog.StringValue("TRACE")
		}
		return a
	}}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageErr("--log-format must be text or json, got %q", format)
}
