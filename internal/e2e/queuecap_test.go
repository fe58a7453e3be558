package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/servertest"
)

// TestQueuedCapThroughFollower: Acquires sent to a follower park on the
// leader and are counted there, once, under serve --limit
// queued-per-session; the follower counts none, the leader refuses the one
// beyond the cap, and both counts return to zero when the callers go away.
func TestQueuedCapThroughFollower(t *testing.T) {
	const cap = 2
	procs := startClusterWith(t, 2, http.DefaultClient, "http://", "--limit", fmt.Sprintf("queued-per-session=%d", cap))
	var leader, follower string
	waitFor(t, "a leader", func() bool {
		for i, p := range procs {
			v, err := servertest.ReadMetric(context.Background(), p.api, "leasehold_is_leader")
			if err == nil && v == 1 {
				leader, follower = p.api, procs[1-i].api
				return true
			}
		}
		return false
	})
	waitHealthy(t, follower)
	parked := func(addr string) float64 {
		v, err := servertest.ReadMetric(context.Background(), addr, "leasehold_acquires_queued")
		if err != nil {
			return -1
		}
		return v
	}
	wantParked := func(onLeader float64) {
		t.Helper()
		waitFor(t, fmt.Sprintf("%v Acquires parked on the leader, none on the follower", onLeader), func() bool {
			return parked(leader) == onLeader && parked(follower) == 0
		})
	}

	hc := &http.Client{}
	t.Cleanup(hc.CloseIdleConnections)
	c := leaseholdv1connect.NewLeaseholdServiceClient(hc, "http://"+follower)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	session := func(owner string) string {
		res, err := c.CreateSession(ctx, connect.NewRequest(&pb.CreateSessionRequest{TtlMs: 60_000, Owner: owner}))
		must(t, "CreateSession", err)
		return res.Msg.GetLeaseId()
	}
	h, s := session("H"), session("S")
	for i := range cap + 1 {
		_, err := c.Acquire(ctx, connect.NewRequest(&pb.AcquireRequest{Name: fmt.Sprint("fq:", i), LeaseId: h}))
		must(t, "Acquire", err)
	}
	wantParked(0)

	pctx, stop := context.WithCancel(ctx)
	defer stop()
	answers := make(chan error, cap)
	for i := range cap {
		go func() {
			_, err := c.Acquire(pctx, connect.NewRequest(&pb.AcquireRequest{Name: fmt.Sprint("fq:", i), LeaseId: s}))
			answers <- err
		}()
	}
	wantParked(cap)

	_, err := c.Acquire(ctx, connect.NewRequest(&pb.AcquireRequest{Name: fmt.Sprint("fq:", cap), LeaseId: s}))
	if api.CodeOf(err) != api.CodeResourceExhausted || !strings.Contains(err.Error(), "serve --limit queued-per-session=N") {
		t.Fatalf("Acquire beyond the cap through the follower: %v, want resource-exhausted naming queued-per-session", err)
	}
	st, err := c.Status(ctx, connect.NewRequest(&pb.StatusRequest{Name: fmt.Sprint("fq:", cap)}))
	must(t, "Status", err)
	if w := st.Msg.GetLock().GetWaiters(); len(w) != 0 {
		t.Fatalf("the refused Acquire left waiters %v", w)
	}
	wantParked(cap)

	stop()
	for range cap {
		if err := <-answers; api.CodeOf(err) != api.CodeCanceled {
			t.Fatalf("cancelled Acquire through the follower: %v, want canceled", err)
		}
	}
	wantParked(0)
}
