package simtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/harness/netfault"
)

// TestSessionSurvivesPartitionedLeader: the leader is cut off from the
// other nodes (raft) and from the client (its API behind a proxy that
// passes nothing, connections left open). The session's TTL covers the
// election (TTL > election timeout + Grace + one keepalive interval), so
// its keepalives move to the new leader: the lock stays held, Done never
// fires, and after healing the old leader rejoins with the same state.
func TestSessionSurvivesPartitionedLeader(t *testing.T) {
	c := Start(t, 3, Options{})
	proxies := map[*Node]*netfault.Proxy{}
	var eps []string
	leader := c.Leader()
	// The leader's proxy first: the client talks to it when the cut comes.
	nodes := append([]*Node{leader}, c.Followers()...)
	for _, n := range nodes {
		p, err := netfault.New(n.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		proxies[n] = p
		eps = append(eps, p.Addr())
	}
	cl := dial(t, strings.Join(eps, ","))
	ctx := ctxT(t, 60*time.Second)
	// TTL well above election timeout + grace + one keepalive interval
	// (0.4 + 0.2 + TTL/3 s): a loaded machine slows the election.
	const ttl = 4 * time.Second
	s, err := cl.NewSession(ctx, client.WithTTL(ttl), client.WithOwner("partitioned"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(cctx)
	}()
	l, err := s.Acquire(ctx, "partition")
	if err != nil {
		t.Fatal(err)
	}

	leader.Partition()
	proxies[leader].Stall()
	stop := time.After(3 * ttl)
	for done := false; !done; {
		select {
		case <-l.Done():
			t.Fatalf("lock lost while the leader was partitioned: %v", context.Cause(l.Context()))
		case <-stop:
			done = true
		}
	}
	// Unary calls wait on a stalled endpoint for their whole context; ask
	// the majority side directly.
	info, err := dial(t, strings.Join(eps[1:], ",")).Status(ctx, "partition")
	if err != nil || info.GetHolder().GetLeaseId() != s.ID() || info.GetHolder().GetToken() != l.Token() {
		t.Fatalf("status after the partition = %v, %v; want held by %s with token %d", info, err, s.ID(), l.Token())
	}
	if leader.Server().Node().IsLeader() {
		t.Fatal("the partitioned node still leads")
	}

	proxies[leader].Resume()
	c.Heal()
	stop = time.After(ttl)
	for done := false; !done; {
		select {
		case <-l.Done():
			t.Fatalf("lock lost after healing: %v", context.Cause(l.Context()))
		case <-stop:
			done = true
		}
	}
	converged(t, c)
}
