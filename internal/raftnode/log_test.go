package raftnode

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// recorder is a slog.Handler that keeps every record.
type recorder struct {
	level slog.Level

	mu   sync.Mutex // protects following
	recs []slog.Record
}

func (r *recorder) Enabled(_ context.Context, l slog.Level) bool { return l >= r.level }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) records() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]slog.Record(nil), r.recs...)
}

func attr(rec slog.Record, key string) (string, bool) {
	var v string
	found := false
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v, found = a.Value.String(), true
			return false
		}
		return true
	})
	return v, found
}

// TestHCLogLevels: raft's levels keep their meaning in slog (ERROR is
// ERROR, not WARN), the message carries no second timestamp or level, and
// the handler's level filters raft's lines.
func TestHCLogLevels(t *testing.T) {
	rec := &recorder{level: slog.LevelDebug}
	l := newHCLogger(slog.New(rec))
	l.Error("failed to appendEntries to", "peer", "n2", "error", "connection refused")
	l.Warn("appendEntries rejected, sending older logs", "peer", "n3")
	l.Info("entering follower state")
	l.Debug("debug line")
	l.Trace("trace line")
	got := rec.records()
	want := []struct {
		level slog.Level
		msg   string
	}{
		{slog.LevelError, "failed to appendEntries to"},
		{slog.LevelWarn, "appendEntries rejected, sending older logs"},
		{slog.LevelInfo, "entering follower state"},
		{slog.LevelDebug, "debug line"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d (trace filtered out): %v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].Level != w.level || got[i].Message != w.msg {
			t.Errorf("record %d = %v %q, want %v %q", i, got[i].Level, got[i].Message, w.level, w.msg)
		}
		if c, _ := attr(got[i], "component"); c != "raft" {
			t.Errorf("record %d component = %q, want raft", i, c)
		}
	}
	if peer, _ := attr(got[0], "peer"); peer != "n2" {
		t.Errorf("peer attr = %q", peer)
	}
	if l.IsTrace() || !l.IsDebug() {
		t.Errorf("IsTrace %v IsDebug %v with a DEBUG handler", l.IsTrace(), l.IsDebug())
	}
	l.Info("initial configuration", "servers", hclog.Fmt("%+v", []int{1, 2}))
	if s, _ := attr(rec.records()[len(rec.records())-1], "servers"); s != "[1 2]" {
		t.Errorf("hclog.Fmt value = %q, want [1 2]", s)
	}
	named := l.Named("snapshot").With("id", 7)
	named.Info("persisted")
	last := rec.records()[len(rec.records())-1]
	if c, _ := attr(last, "component"); c != "raft.snapshot" {
		t.Errorf("named component = %q", c)
	}
	if id, _ := attr(last, "id"); id != "7" {
		t.Errorf("implied arg id = %q", id)
	}
}

// TestHCLogFirstElectionIsInfo: the first election of a node that never
// knew a leader is a normal start (INFO); losing a known leader stays WARN.
func TestHCLogFirstElectionIsInfo(t *testing.T) {
	rec := &recorder{level: slog.LevelInfo}
	l := newHCLogger(slog.New(rec))
	l.Warn("heartbeat timeout reached, starting election", "last-leader-addr", "", "last-leader-id", "")
	l.Warn("heartbeat timeout reached, starting election", "last-leader-addr", "127.0.0.1:7521", "last-leader-id", "n2")
	got := rec.records()
	if len(got) != 2 || got[0].Level != slog.LevelInfo || got[1].Level != slog.LevelWarn {
		t.Fatalf("levels = %v, want INFO then WARN", got)
	}
}

// TestHCLogRepeatsLimited: one dead peer failing every heartbeat logs one
// line per LogRepeatInterval, and the next line counts what was suppressed;
// another peer is not held back.
func TestHCLogRepeatsLimited(t *testing.T) {
	rec := &recorder{level: slog.LevelInfo}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := &hclogAdapter{l: slog.New(rec), name: "raft", limit: newRepeatLimiter(LogRepeatInterval, func() time.Time { return now }), stopping: new(atomic.Bool)}
	for range 39 { // 39 failures in 7 s
		a.Error("failed to heartbeat to", "peer", "127.0.0.1:7522", "error", "connection refused")
		now = now.Add(180 * time.Millisecond)
	}
	a.Error("failed to heartbeat to", "peer", "127.0.0.1:7523", "error", "connection refused")
	if n := len(rec.records()); n != 2 {
		t.Fatalf("%d lines in 7 s for two dead peers, want 2", n)
	}
	now = now.Add(LogRepeatInterval)
	a.Error("failed to heartbeat to", "peer", "127.0.0.1:7522", "error", "connection refused")
	got := rec.records()
	if len(got) != 3 {
		t.Fatalf("%d lines, want 3", len(got))
	}
	if s, _ := attr(got[2], "suppressed"); s != "38" {
		t.Errorf("suppressed = %q, want 38", s)
	}
	a.Info("info lines are never limited")
	a.Info("info lines are never limited")
	if n := len(rec.records()); n != 5 {
		t.Errorf("%d lines, want 5", n)
	}
}

// TestNodeStartLogsNoWarning: a single node's normal start logs nothing at
// WARN or above, and no raft message embeds hclog's own timestamp or level.
func TestNodeStartLogsNoWarning(t *testing.T) {
	rec := &recorder{level: slog.LevelDebug}
	cfg := testConfig(t, t.TempDir())
	cfg.Logger = slog.New(rec)
	n := open(t, cfg)
	waitLeader(t, n)
	mustApply(t, n, create("l1", 5000))
	for _, r := range rec.records() {
		if r.Level >= slog.LevelWarn {
			t.Errorf("a normal start logged %v %q", r.Level, r.Message)
		}
		if strings.Contains(r.Message, "[INFO]") || strings.Contains(r.Message, "[WARN]") || strings.Contains(r.Message, "Z ") {
			t.Errorf("raft message carries its own level or time: %q", r.Message)
		}
	}
	var _ hclog.Logger = newHCLogger(cfg.Logger)
}
