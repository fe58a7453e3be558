package simtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/server"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		// raft may drop a future at shutdown; Node.await leaves its waiter behind.
		goleak.IgnoreAnyFunction("github.com/leasehold/leasehold/internal/raftnode.(*Node).await.func1"))
}

func dial(t *testing.T, endpoints string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, endpoints)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// snapshot returns a node's applied state as bytes (deterministic encoding).
func snapshot(t *testing.T, n *Node) []byte {
	t.Helper()
	var data []byte
	var err error
	n.Server().Node().Read(func(m *fsm.Machine) { data, err = m.Snapshot() })
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// converged waits until every running node has applied the same state.
func converged(t *testing.T, c *Cluster) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var first []byte
		same := true
		for _, n := range c.Nodes {
			if !n.Running() {
				continue
			}
			s := snapshot(t, n)
			if first == nil {
				first = s
			} else if !bytes.Equal(first, s) {
				same = false
			}
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("nodes did not converge within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Every node answers: writes sent to followers are forwarded, reads are
// linearizable by default, and stale reads are served locally.
func TestAnyNodeAnswers(t *testing.T) {
	c := Start(t, 3, Options{})
	ctx := ctxT(t, 20*time.Second)
	var last uint64
	for _, n := range c.Nodes {
		cl := dial(t, n.Addr)
		s, err := cl.NewSession(ctx, client.WithTTL(5*time.Second), client.WithOwner("via-"+n.ID))
		if err != nil {
			t.Fatalf("session via %s: %v", n.ID, err)
		}
		l, err := s.Acquire(ctx, "any:"+n.ID)
		if err != nil {
			t.Fatalf("acquire via %s: %v", n.ID, err)
		}
		if l.Token() <= last {
			t.Fatalf("token %d via %s not above %d", l.Token(), n.ID, last)
		}
		last = l.Token()
		if err := cl.KVPut(ctx, "k:"+n.ID, []byte(n.ID), l.Token(), false); err != nil {
			t.Fatalf("kv put via %s: %v", n.ID, err)
		}
		// A linearizable read from any node sees the write just acknowledged.
		for _, m := range c.Nodes {
			v, tok, err := dial(t, m.Addr).KVGet(ctx, "k:"+n.ID)
			if err != nil || string(v) != n.ID || tok != l.Token() {
				t.Fatalf("read via %s after write via %s = %q %d %v", m.ID, n.ID, v, tok, err)
			}
		}
		defer s.Close(context.Background())
	}
	// Stale reads are served by the node itself, even cut off from the others.
	f := c.Followers()[0]
	f.Partition()
	info, err := dial(t, f.Addr).Status(ctx, "any:n1", client.Stale())
	if err != nil || info.GetHolder() == nil {
		t.Fatalf("stale status on a partitioned follower = %v, %v", info, err)
	}
	c.Heal()
}

// A session survives the leader's loss: keepalives continue against the
// new leader, the lock stays held, Done never fires, and tokens continue
// above every token issued before.
func TestSessionSurvivesLeaderLoss(t *testing.T) {
	c := Start(t, 3, Options{})
	ctx := ctxT(t, 30*time.Second)
	cl := dial(t, c.Endpoints())
	// TTL well above election timeout + grace + one keepalive interval
	// (0.4 + 0.2 + TTL/3 s): a loaded machine slows the election.
	const ttl = 4 * time.Second
	s, err := cl.NewSession(ctx, client.WithTTL(ttl), client.WithOwner("survivor"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	l, err := s.Acquire(ctx, "survive")
	if err != nil {
		t.Fatal(err)
	}
	old := c.Leader()
	old.Stop()
	newLeader := c.Leader()
	if newLeader == old {
		t.Fatal("leader did not change")
	}
	// Two full TTLs pass on the new leader.
	stop := time.After(2 * ttl)
	for done := false; !done; {
		select {
		case <-l.Done():
			t.Fatalf("lock lost across leader change: %v", context.Cause(l.Context()))
		case <-stop:
			done = true
		}
	}
	info, err := cl.Status(ctx, "survive")
	if err != nil || info.GetHolder().GetLeaseId() != s.ID() || info.GetHolder().GetToken() != l.Token() {
		t.Fatalf("status after leader change = %v, %v", info, err)
	}
	s2, err := cl.NewSession(ctx, client.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(context.Background())
	l2, err := s2.Acquire(ctx, "after")
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= l.Token() {
		t.Fatalf("token after leader change %d not above %d", l2.Token(), l.Token())
	}
	old.Restart()
	converged(t, c)
}

// The earliest moment a lock passes to another session after its holder
// stops renewing: never before sent + TTL·(1+drift) of the last renewal
// (without a leader change), and never before the new leader's election +
// Grace + TTL·(1+drift) (with one). Both are also bounded above.
func TestLockPassBounds(t *testing.T) {
	const ttl = time.Second
	const drift = 0.02
	grantorTTL := ttl + time.Duration(float64(ttl)*drift)
	for _, change := range []bool{false, true} {
		t.Run(fmt.Sprintf("leader_change=%v", change), func(t *testing.T) {
			c := Start(t, 3, Options{})
			ctx := ctxT(t, 30*time.Second)
			cl := dial(t, c.Endpoints())
			holder, err := cl.NewSession(ctx, client.WithTTL(ttl), client.WithOwner("holder"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := holder.Acquire(ctx, "pass"); err != nil {
				t.Fatal(err)
			}
			waiter, err := cl.NewSession(ctx, client.WithTTL(10*time.Second), client.WithOwner("waiter"))
			if err != nil {
				t.Fatal(err)
			}
			defer waiter.Close(context.Background())
			// Wait for a keepalive, then stop renewing. The last renewal was
			// sent at Deadline − (TTL·(1−drift) − margin).
			first := holder.Deadline()
			for holder.Deadline().Equal(first) {
				time.Sleep(5 * time.Millisecond)
			}
			holder.Orphan()
			lastSent := holder.Deadline().Add(-(ttl - time.Duration(float64(ttl)*drift) - 100*time.Millisecond))
			var killed time.Time
			if change {
				leader := c.Leader()
				killed = time.Now()
				leader.Stop()
			}
			if _, err := waiter.Acquire(ctx, "pass"); err != nil {
				t.Fatal(err)
			}
			granted := time.Now()
			if got := granted.Sub(lastSent); got < grantorTTL {
				t.Fatalf("lock passed %s after the last renewal was sent; must be ≥ TTL·(1+drift) = %s", got, grantorTTL)
			}
			// Upper bounds: the expiry tick and apply, plus an election
			// when the leader changed, with slack for a loaded CI machine.
			if !change {
				if got, upper := granted.Sub(lastSent), grantorTTL+time.Second; got > upper {
					t.Fatalf("lock passed only %s after the last renewal; expected within %s", got, upper)
				}
			} else {
				grace := 200 * time.Millisecond // 2 × LeaderLeaseTimeout
				got := granted.Sub(killed)
				if got < grace+grantorTTL {
					t.Fatalf("lock passed %s after the leader died; must be ≥ Grace + TTL·(1+drift) = %s", got, grace+grantorTTL)
				}
				if upper := grace + grantorTTL + 3*time.Second; got > upper {
					t.Fatalf("lock passed only %s after the leader died; expected within %s", got, upper)
				}
			}
			t.Logf("lock passed %s after the last renewal was sent (leader change: %v)", granted.Sub(lastSent), change)
		})
	}
}

// A deposed leader cannot grant, release, expire or accept a fenced write:
// all are log entries it cannot commit.
func TestDeposedLeaderCannotWrite(t *testing.T) {
	c := Start(t, 3, Options{})
	ctx := ctxT(t, 30*time.Second)
	cl := dial(t, c.Endpoints())
	s, err := cl.NewSession(ctx, client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(ctx, "deposed")
	if err != nil {
		t.Fatal(err)
	}
	old := c.Leader()
	old.Partition()
	// Talk to the old leader only: its writes fail (nothing hangs past the
	// deadline) with a code that says it was not applied or may not be.
	oc := dial(t, old.Addr)
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	start := time.Now()
	err = oc.KVPut(wctx, "deposed", []byte("late"), l.Token(), false)
	if err == nil {
		t.Fatal("partitioned leader accepted a fenced write")
	}
	if code := api.CodeOf(err); code != api.CodeOutcomeUnknown && code != api.CodeUnavailable && code != api.CodeNotLeader && code != api.CodeDeadlineExceeded {
		t.Fatalf("partitioned leader write: code %s (%v)", code, err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("write on a partitioned leader took %s, past its 3s deadline", d)
	}
	// The majority elects a new leader and serves.
	var others []*Node
	for _, n := range c.Nodes {
		if n != old {
			others = append(others, n)
		}
	}
	mc := dial(t, others[0].Addr+","+others[1].Addr)
	if err := mc.KVPut(ctx, "deposed", []byte("fresh"), l.Token(), false); err != nil {
		t.Fatalf("majority write: %v", err)
	}
	c.Heal()
	converged(t, c)
	v, _, err := cl.KVGet(ctx, "deposed")
	if err != nil || string(v) != "fresh" {
		t.Fatalf("value after heal = %q, %v", v, err)
	}
}

// A 5-node cluster keeps serving after losing two nodes (the leader among
// them); a 3-node cluster that lost two refuses writes with unavailable
// within the request's deadline.
func TestQuorumLoss(t *testing.T) {
	t.Run("five_lose_two", func(t *testing.T) {
		c := Start(t, 5, Options{})
		ctx := ctxT(t, 30*time.Second)
		c.Leader().Stop()
		c.Followers()[0].Stop()
		cl := dial(t, c.Endpoints())
		s, err := cl.NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		if _, err := s.Acquire(ctx, "five"); err != nil {
			t.Fatalf("5-node cluster with 3 up: %v", err)
		}
	})
	t.Run("three_lose_two", func(t *testing.T) {
		c := Start(t, 3, Options{})
		ctx := ctxT(t, 30*time.Second)
		c.Leader().Stop()
		c.Followers()[0].Stop()
		var last *Node
		for _, n := range c.Nodes {
			if n.Running() {
				last = n
			}
		}
		cl := dial(t, last.Addr)
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		start := time.Now()
		_, err := cl.NewSession(rctx)
		if code := api.CodeOf(err); code != api.CodeUnavailable && code != api.CodeDeadlineExceeded {
			t.Fatalf("3-node cluster with 1 up: code %s (%v)", code, err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("refusal took %s, past the 2s deadline", d)
		}
	})
}

// A node that was down while the log was compacted catches up by snapshot
// install, and tokens stay monotonic when it later leads.
func TestSnapshotCatchUp(t *testing.T) {
	c := Start(t, 3, Options{Configure: func(_ string, cfg *server.Config) {
		cfg.Raft.SnapshotThreshold = 16
		cfg.Raft.SnapshotInterval = 100 * time.Millisecond
		cfg.Raft.TrailingLogs = 4
		// Two of three nodes run most of this test: a loaded machine must
		// not cost the leader its quorum (nothing here measures failover).
		cfg.Raft.HeartbeatTimeout = time.Second
		cfg.Raft.ElectionTimeout = time.Second
		cfg.Raft.LeaderLeaseTimeout = 500 * time.Millisecond
	}})
	ctx := ctxT(t, 60*time.Second)
	lagger := c.Followers()[0]
	lagger.Stop()
	cl := dial(t, c.Endpoints())
	s, err := cl.NewSession(ctx, client.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	var top uint64
	for i := range 100 {
		l, err := s.Acquire(ctx, fmt.Sprintf("snap:%d", i%5))
		if err != nil {
			t.Fatal(err)
		}
		top = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Wait until the leader has snapshotted past the lagger's log.
	leader := c.Leader()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := leader.Server().Node().Raft().Stats()
		if st["last_snapshot_index"] != "0" && st["last_snapshot_index"] != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leader never snapshotted: %v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	lagger.Restart()
	converged(t, c)
	// Make the lagger lead; its next grant is above everything issued.
	if _, err := dial(t, lagger.Addr).TransferLeader(ctx, lagger.ID); err != nil {
		t.Fatalf("transfer leadership: %v", err)
	}
	if got := c.Leader(); got != lagger {
		t.Fatalf("leader is %s, want %s", got.ID, lagger.ID)
	}
	l, err := s.Acquire(ctx, "snap:after")
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() <= top {
		t.Fatalf("token %d after catch-up not above %d", l.Token(), top)
	}
	if st := lagger.Server().Node().Raft().Stats(); st["last_snapshot_index"] == "0" {
		t.Errorf("lagger has no snapshot: it caught up without one? %v", st)
	}
}

// An Acquire that gives up after leadership moved still withdraws its
// queue entry (through the new leader), so the waiter never ends up holding
// a lock whose token nobody learned.
func TestCancelWaitAfterLeaderChange(t *testing.T) {
	c := Start(t, 3, Options{})
	ctx := ctxT(t, 30*time.Second)
	leader := c.Leader()
	lc := dial(t, leader.Addr)
	h, err := lc.NewSession(ctx, client.WithOwner("holder"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	held, err := h.Acquire(ctx, "moved")
	if err != nil {
		t.Fatal(err)
	}
	w, err := lc.NewSession(ctx, client.WithOwner("waiter"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(context.Background())
	waited := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := w.Acquire(wctx, "moved") // served by the old leader
		waited <- err
	}()
	// Once the waiter is queued, move leadership away.
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, err := lc.Status(ctx, "moved")
		if err == nil && len(info.GetWaiters()) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiter never queued: %v %v", info, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := lc.TransferLeader(ctx, c.Followers()[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; !errors.Is(err, client.ErrDeadlineExceeded) {
		t.Fatalf("waiter: %v, want deadline-exceeded", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := dial(t, c.Endpoints()).Status(ctx, "moved")
	if err != nil {
		t.Fatal(err)
	}
	if info.GetHolder() != nil || len(info.GetWaiters()) != 0 {
		t.Fatalf("after the waiter gave up and the holder released: holder %v, waiters %v; want a free lock", info.GetHolder(), info.GetWaiters())
	}
}

// Asking for leadership to move to the node that already leads answers
// with that node, as a move that has already happened; it is not an error,
// since leadership can move on its own between a caller's look at the
// cluster and its request.
func TestTransferLeaderToTheLeader(t *testing.T) {
	c := Start(t, 3, Options{})
	ctx := ctxT(t, 20*time.Second)
	leader := c.Leader()
	got, err := dial(t, c.Followers()[0].Addr).TransferLeader(ctx, leader.ID)
	if err != nil {
		t.Fatalf("transfer to the leader %s: %v", leader.ID, err)
	}
	if got != leader.ID {
		t.Fatalf("transfer to the leader %s answered %q", leader.ID, got)
	}
}
