package e2e

import (
	"context"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/client"
)

// grpcClient speaks gRPC over cleartext HTTP/2 to one node, as the Go
// client does, without failing over.
func grpcClient(addr string) (leaseholdv1connect.LeaseholdServiceClient, *http.Client) {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &p}}
	return leaseholdv1connect.NewLeaseholdServiceClient(hc, "http://"+addr, connect.WithGRPC()), hc
}

// TestPausedLeader stops the leader process with SIGSTOP (its sockets stay
// open; nothing answers) and checks the README's promise:
//
//   - a follower asked to forward a renewal to it gives up within about a
//     second with a retryable code (unavailable or not-leader), instead of
//     holding the request for the caller's whole deadline;
//   - a session whose TTL (5 s) covers the election (TTL > election
//     timeout + grace + one keepalive interval) survives with its lock:
//     its keepalive stream, which was on the paused leader, moves to the
//     new leader, Done never fires, and the lock is still held after
//     SIGCONT.
func TestPausedLeader(t *testing.T) {
	procs := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	leader, followers := leaderAndFollowers(t, procs)

	// The paused leader first, so that the keepalive stream is on it.
	eps := []string{leader.api}
	for _, f := range followers {
		eps = append(eps, f.api)
	}
	c, err := client.Dial(ctx, strings.Join(eps, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const ttl = 5 * time.Second
	s, err := c.NewSession(ctx, client.WithTTL(ttl), client.WithOwner("paused-leader"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(ctx, "e2e:paused")
	if err != nil {
		t.Fatal(err)
	}

	// A raw client of one follower, and a session renewed through it.
	fc, hc := grpcClient(followers[0].api)
	defer hc.CloseIdleConnections()
	var fs *connect.Response[pb.CreateSessionResponse]
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for fs == nil { // until the leader has registered its API address
		if fs, err = fc.CreateSession(ctx, connect.NewRequest(&pb.CreateSessionRequest{TtlMs: ttl.Milliseconds()})); err != nil {
			if api.CodeOf(err) != api.CodeUnavailable {
				t.Fatal(err)
			}
			<-tick.C
		}
	}
	ka := connect.NewRequest(&pb.KeepAliveRequest{LeaseId: fs.Msg.GetLeaseId()})
	if _, err := fc.KeepAlive(ctx, ka); err != nil {
		t.Fatalf("forwarded keepalive before the pause: %v", err)
	}

	if err := leader.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = leader.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	defer resume()

	kctx, kcancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = fc.KeepAlive(kctx, ka)
	kcancel()
	took := time.Since(paused)
	switch code := api.CodeOf(err); {
	case err == nil:
		// The follower already knew a new leader: fine, nothing waited.
	case code != api.CodeUnavailable && code != api.CodeNotLeader:
		t.Fatalf("forwarded keepalive to the paused leader: %v (code %q), want unavailable or not-leader", err, code)
	}
	if took > 2500*time.Millisecond {
		t.Fatalf("the follower held a renewal for the paused leader %v, want about 1 s", took)
	}
	t.Logf("follower answered a renewal for the paused leader in %v: %v", took.Round(time.Millisecond), err)

	watch := func(d time.Duration, when string) {
		t.Helper()
		stop := time.After(d)
		for {
			select {
			case <-l.Done():
				t.Fatalf("lock lost %s (%v after the pause): %v", when, time.Since(paused).Round(time.Millisecond), context.Cause(l.Context()))
			case <-stop:
				return
			}
		}
	}
	watch(2*ttl, "while the leader was paused")
	// Ask the majority side: the paused node answers nothing.
	mc, err := client.Dial(ctx, followers[0].api+","+followers[1].api)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	info, err := mc.Status(ctx, "e2e:paused")
	if err != nil || info.GetHolder().GetLeaseId() != s.ID() || info.GetHolder().GetToken() != l.Token() {
		t.Fatalf("status while the old leader is paused = %v, %v; want held by %s with token %d", info, err, s.ID(), l.Token())
	}

	resume()
	watch(ttl, "after SIGCONT")
	info, err = mc.Status(ctx, "e2e:paused")
	if err != nil || info.GetHolder().GetToken() != l.Token() {
		t.Fatalf("status after SIGCONT = %v, %v", info, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	defer ccancel()
	if err := s.Close(cctx); err != nil {
		t.Fatal(err)
	}
}
