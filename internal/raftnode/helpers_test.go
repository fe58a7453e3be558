package raftnode

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// testConfig is a single-node Config on dir with timings short enough for
// tests (an election in a few hundred milliseconds) and long enough that a
// loaded machine running -race does not cost a leader its lease.
func testConfig(t *testing.T, dir string) Config {
	c := DefaultConfig()
	c.DataDir = dir
	c.HeartbeatTimeout = 200 * time.Millisecond
	c.ElectionTimeout = 200 * time.Millisecond
	c.LeaderLeaseTimeout = 150 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	c.Logger = testLogger(t)
	return c
}

// testLogger logs to t.Log until the test ends, then drops lines, so a
// goroutine that logs while shutting down cannot fail the test run.
func testLogger(t *testing.T) *slog.Logger {
	w := &tWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tWriter struct {
	t    *testing.T
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

// open opens a node and closes it when the test ends.
func open(t *testing.T, cfg Config) *Node {
	t.Helper()
	n, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("close %s: %v", n.ID(), err)
		}
	})
	return n
}

// eventually polls cond every few milliseconds until it is true, and fails
// the test after 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// waitLeader waits until exactly one of nodes leads and returns it.
func waitLeader(t *testing.T, nodes ...*Node) *Node {
	t.Helper()
	var leader *Node
	eventually(t, "a leader", func() bool {
		leader = nil
		for _, n := range nodes {
			if n.IsLeader() {
				if leader != nil {
					return false
				}
				leader = n
			}
		}
		return leader != nil
	})
	return leader
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mustApply applies cmd on n and fails on an error or a refusal.
func mustApply(t *testing.T, n *Node, cmd *fsmpb.Command) fsm.Result {
	t.Helper()
	res, err := n.Apply(ctxT(t), cmd)
	if err != nil {
		t.Fatalf("apply %v: %v", cmd, err)
	}
	if res.Err != nil {
		t.Fatalf("apply %v: refused: %v", cmd, res.Err)
	}
	return res
}

// state is the node's applied state as snapshot bytes (deterministic, so
// equal states compare equal) and its token counter.
func state(t *testing.T, n *Node) ([]byte, uint64) {
	t.Helper()
	var (
		data  []byte
		token uint64
		err   error
	)
	n.Read(func(m *fsm.Machine) {
		data, err = m.Snapshot()
		token = m.Token()
	})
	if err != nil {
		t.Fatal(err)
	}
	return data, token
}

// waitFloorRaised waits until n, leading after a restart, has raised its
// token floor, and until every entry before is applied.
func waitFloorRaised(t *testing.T, n *Node) {
	t.Helper()
	eventually(t, "the restart floor", func() bool { return !n.floorPending.Load() })
	if err := n.ReadIndex(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// withoutHeader drops the header record (token counter and grant clock)
// of a snapshot stream.
func withoutHeader(t *testing.T, snap []byte) []byte {
	t.Helper()
	body, err := fsm.SnapshotBody(snap)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func create(lease string, ttlMs int64) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_CreateSession{CreateSession: &fsmpb.CreateSession{LeaseId: lease, TtlMs: ttlMs, Owner: "owner-" + lease}}}
}

func acquire(name, lease string, lockDelayMs int64) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_Acquire{Acquire: &fsmpb.Acquire{Name: name, LeaseId: lease, LockDelayMs: lockDelayMs, WaitId: 1}}}
}

func expire(lease string) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_Expire{Expire: &fsmpb.Expire{LeaseId: lease}}}
}

func kvPut(key, value string, token uint64) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_KvPut{KvPut: &fsmpb.KVPut{Key: key, Value: []byte(value), Token: token}}}
}

// populate applies commands that leave every kind of state behind: live
// sessions, a holding, a queue entry, a lock-delay and a KV entry. It
// returns the newest token.
func populate(t *testing.T, n *Node) uint64 {
	t.Helper()
	for _, id := range []string{"s1", "s2", "s3"} {
		mustApply(t, n, create(id, 5000))
	}
	t1 := mustApply(t, n, acquire("a", "s1", 0)).Holding.GetToken()
	if res := mustApply(t, n, acquire("a", "s2", 0)); !res.Queued {
		t.Fatal("s2 was not queued for a")
	}
	t3 := mustApply(t, n, acquire("b", "s3", 30_000)).Holding.GetToken()
	mustApply(t, n, kvPut("k", "v1", t1))
	if res := mustApply(t, n, expire("s3")); len(res.LockDelays) != 1 {
		t.Fatalf("expiring s3 started lock-delays %v, want one on b", res.LockDelays)
	}
	if t3 <= t1 {
		t.Fatalf("tokens %d then %d", t1, t3)
	}
	return t3
}

// checkPopulated asserts the state populate left.
func checkPopulated(t *testing.T, n *Node) {
	t.Helper()
	n.Read(func(m *fsm.Machine) {
		if m.Session("s1") == nil || m.Session("s2") == nil || m.Session("s3") != nil {
			t.Errorf("sessions s1 %v s2 %v s3 %v; want s1, s2 live and s3 expired", m.Session("s1"), m.Session("s2"), m.Session("s3"))
		}
		a := m.Lock("a")
		if a.Holder.GetLeaseId() != "s1" || len(a.Waiters) != 1 || a.Waiters[0].GetLeaseId() != "s2" {
			t.Errorf("lock a: holder %v waiters %v; want s1 holding, s2 queued", a.Holder, a.Waiters)
		}
		if b := m.Lock("b"); b.Holder != nil || !b.Delayed {
			t.Errorf("lock b: holder %v delayed %v; want in lock-delay", b.Holder, b.Delayed)
		}
		if kv := m.KV("k"); string(kv.GetValue()) != "v1" {
			t.Errorf("kv k = %v, want v1", kv)
		}
	})
}

// testLoggerTo logs to t.Log and to w.
func testLoggerTo(t *testing.T, w io.Writer) *slog.Logger {
	tw := &tWriter{t: t}
	t.Cleanup(func() {
		tw.mu.Lock()
		tw.done = true
		tw.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(io.MultiWriter(tw, w), &slog.HandlerOptions{Level: slog.LevelInfo}))
}
