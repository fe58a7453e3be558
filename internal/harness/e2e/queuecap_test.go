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
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// TestQueuedCapThroughFollower: Acquires sent to a follower park on the
// leader and are counted there, once, under serve --limit
// queued-per-session; the follower counts none and the leader refuses the
// one beyond the cap. When leadership moves, the parked Acquires stay
// counted on the node they wait on, the new leader counts those that park
// on it, and every count returns to zero when the callers go away.
func TestQueuedCapThroughFollower(t *testing.T) {
	const cap = 2
	procs := startClusterWith(t, 2, http.DefaultClient, "http://", "--limit", fmt.Sprintf("queued-per-session=%d", cap))
	var leader, follower, followerID string
	waitFor(t, "a leader", func() bool {
		for i, p := range procs {
			v, err := servertest.ReadMetric(context.Background(), p.api, "leasehold_is_leader")
			if err == nil && v == 1 {
				leader, follower, followerID = p.api, procs[1-i].api, procs[1-i].id
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
	wantParked := func(onLeader, onFollower float64) {
		t.Helper()
		waitFor(t, fmt.Sprintf("%v Acquires parked on the first leader, %v on the first follower", onLeader, onFollower), func() bool {
			return parked(leader) == onLeader && parked(follower) == onFollower
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
	wantParked(0, 0)

	pctx, stop := context.WithCancel(ctx)
	defer stop()
	answers := make(chan error, cap+1)
	park := func(name string) {
		go func() {
			_, err := c.Acquire(pctx, connect.NewRequest(&pb.AcquireRequest{Name: name, LeaseId: s}))
			answers <- err
		}()
	}
	for i := range cap {
		park(fmt.Sprint("fq:", i))
	}
	wantParked(cap, 0)

	_, err := c.Acquire(ctx, connect.NewRequest(&pb.AcquireRequest{Name: fmt.Sprint("fq:", cap), LeaseId: s}))
	if api.CodeOf(err) != api.CodeResourceExhausted || !strings.Contains(err.Error(), "serve --limit queued-per-session=N") {
		t.Fatalf("Acquire beyond the cap through the follower: %v, want resource-exhausted naming queued-per-session", err)
	}
	st, err := c.Status(ctx, connect.NewRequest(&pb.StatusRequest{Name: fmt.Sprint("fq:", cap)}))
	must(t, "Status", err)
	if w := st.Msg.GetLock().GetWaiters(); len(w) != 0 {
		t.Fatalf("the refused Acquire left waiters %v", w)
	}
	wantParked(cap, 0)

	// The follower becomes the leader. The Acquires parked on the first
	// leader still wait there, counted there; the session parks one more
	// on the new leader, which counts only it.
	cl := leaseholdv1connect.NewClusterServiceClient(hc, "http://"+follower)
	_, err = cl.TransferLeader(ctx, connect.NewRequest(&pb.TransferLeaderRequest{Id: followerID}))
	must(t, "TransferLeader", err)
	waitFor(t, "the follower leads", func() bool {
		v, err := servertest.ReadMetric(context.Background(), follower, "leasehold_is_leader")
		return err == nil && v == 1
	})
	park(fmt.Sprint("fq:", cap))
	wantParked(cap, 1)
	for i := range cap + 1 {
		waitFor(t, "S waits for "+fmt.Sprint("fq:", i), func() bool {
			st, err := c.Status(ctx, connect.NewRequest(&pb.StatusRequest{Name: fmt.Sprint("fq:", i)}))
			return err == nil && len(st.Msg.GetLock().GetWaiters()) == 1
		})
	}

	stop()
	for range cap + 1 {
		if err := <-answers; api.CodeOf(err) != api.CodeCanceled {
			t.Fatalf("cancelled Acquire: %v, want canceled", err)
		}
	}
	wantParked(0, 0)
	for i := range cap + 1 {
		waitFor(t, "no waiter for "+fmt.Sprint("fq:", i), func() bool {
			st, err := c.Status(ctx, connect.NewRequest(&pb.StatusRequest{Name: fmt.Sprint("fq:", i)}))
			return err == nil && len(st.Msg.GetLock().GetWaiters()) == 0
		})
	}
}
