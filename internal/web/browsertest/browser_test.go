package browsertest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"
	"github.com/hashicorp/raft"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/clock"
	"github.com/leasehold/leasehold/internal/harness/servertest"
	"github.com/leasehold/leasehold/internal/server"
)

// browser starts a headless Chromium for the test and returns its context.
// Without a chromium binary the test is skipped on a developer machine and
// fails in CI (CI=true), where scripts/ci-services.sh installs it.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		t.Fatal("no chromium on PATH: scripts/ci-services.sh installs Debian's chromium")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1440, 1000))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelB := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancelB()
		cancelA()
	})
	// The first call starts the browser, which lives as long as bctx.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	// Bound the whole browser session: no test may hang CI.
	tctx, cancelT := context.WithTimeout(bctx, 60*time.Second)
	t.Cleanup(cancelT)
	return tctx
}

// within runs actions and fails unless they finish within d.
func within(t *testing.T, bctx context.Context, d time.Duration, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		dctx, cancel := context.WithTimeout(bctx, 2*time.Second)
		defer cancel()
		page, _ := chromedp.Run(dctx, chromedp.OuterHTML(chromedp.CSS("main")))
		t.Fatalf("%s (within %v): %v\npage: %s", what, d, err, page)
	}
}

func mustOK(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func session(t *testing.T, c leaseholdv1connect.LeaseholdServiceClient, ttlMs int64, owner string) string {
	t.Helper()
	resp, err := c.CreateSession(ctxT(t), connect.NewRequest(&pb.CreateSessionRequest{TtlMs: ttlMs, Owner: owner}))
	mustOK(t, "CreateSession "+owner, err)
	return resp.Msg.GetLeaseId()
}

func acquire(t *testing.T, c leaseholdv1connect.LeaseholdServiceClient, name, lease string) uint64 {
	t.Helper()
	resp, err := c.TryAcquire(ctxT(t), connect.NewRequest(&pb.TryAcquireRequest{Name: name, LeaseId: lease}))
	mustOK(t, "TryAcquire "+name, err)
	return resp.Msg.GetHolding().GetToken()
}

func text(t *testing.T, bctx context.Context, sel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("read %s: %v", sel, err)
	}
	return s
}

// TestDashboardSeedScenario drives the seed scenario against a server with
// a manual clock while the dashboard is open: the lock appears within a
// second of its grant, with owner and token; the expiry, the larger token
// and the refused late write show in the feed and on the timeline; a
// release removes the lock within a second.
func TestDashboardSeedScenario(t *testing.T) {
	const name, key = "report:417:rebuild", "report:417"
	bctx := browser(t)
	c := servertest.Start(t, servertest.Options{Clock: clock.NewManual(time.Now())})
	cl := c.Client
	within(t, bctx, 20*time.Second, "open the dashboard",
		chromedp.Navigate(c.URL+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS(`#members tbody tr[data-role="leader"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#conn.conn-up`)))

	a := session(t, cl, 5000, "worker-A")
	t1 := acquire(t, cl, name, a)
	row := fmt.Sprintf(`#locks tr[data-lock=%q]`, name)
	within(t, bctx, time.Second, "the grant appears", chromedp.WaitVisible(chromedp.CSS(row)))
	if got := text(t, bctx, row+" td.owner"); got != "worker-A" {
		t.Errorf("owner cell = %q, want worker-A", got)
	}
	if got := text(t, bctx, row+" td.token"); got != strconv.FormatUint(t1, 10) {
		t.Errorf("token cell = %q, want %d", got, t1)
	}
	if got := text(t, bctx, row+" td.ttl"); got == "" || got == "not leader" {
		t.Errorf("TTL cell = %q, want a countdown", got)
	}

	// worker-A pauses past its TTL: the leader expires lease-1.
	c.Manual().Advance(6 * time.Second)
	c.AdvanceUntil("lease-1 to expire", func() bool {
		resp, err := cl.Status(ctxT(t), connect.NewRequest(&pb.StatusRequest{Name: name}))
		return err == nil && resp.Msg.GetLock().GetHolder() == nil
	})
	b := session(t, cl, 5000, "worker-B")
	t2 := acquire(t, cl, name, b)
	c.Manual().Advance(100 * time.Millisecond)
	_, err := cl.KvPut(ctxT(t), connect.NewRequest(&pb.KvPutRequest{Key: key, Value: []byte("v2"), Token: t2}))
	mustOK(t, "B's write", err)
	c.Manual().Advance(100 * time.Millisecond)
	_, err = cl.KvPut(ctxT(t), connect.NewRequest(&pb.KvPutRequest{Key: key, Value: []byte("v1"), Token: t1}))
	if err == nil {
		t.Fatal("A's late write was accepted")
	}

	within(t, bctx, time.Second, "B's grant replaces A's",
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`%s[data-token="%d"]`, row, t2))))
	within(t, bctx, time.Second, "the feed shows the expiry, the accepted and the refused write",
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#events li.ev-expired[data-token="%d"]`, t1))),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#events li.ev-kv_accepted[data-token="%d"]`, t2))),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#events li.ev-kv_refused[data-token="%d"]`, t1))))
	if got := text(t, bctx, `#events li.ev-kv_refused`); !strings.Contains(got, "stale-token") || !strings.Contains(got, key) {
		t.Errorf("refused write in the feed = %q, want the key and stale-token", got)
	}
	within(t, bctx, 2*time.Second, "the timeline shows both grants, the expiry and both writes",
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#timeline[data-name=%q]`, name))),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#timeline line.grant[data-token="%d"]`, t1))),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#timeline line.grant[data-token="%d"]`, t2))),
		chromedp.WaitVisible(chromedp.CSS(`#timeline path.expired`)),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#timeline circle.accepted[data-token="%d"]`, t2))),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#timeline g.refused[data-token="%d"]`, t1))))

	if out := os.Getenv("LEASEHOLD_DASHBOARD_PNG"); out != "" {
		ctx, cancel := context.WithTimeout(bctx, 10*time.Second)
		defer cancel()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		mustOK(t, "screenshot", err)
		mustOK(t, "write screenshot", os.WriteFile(out, png, 0o644))
	}

	_, err = cl.Release(ctxT(t), connect.NewRequest(&pb.ReleaseRequest{Name: name, LeaseId: b, Token: t2}))
	mustOK(t, "B's release", err)
	within(t, bctx, time.Second, "the release removes the lock", chromedp.WaitNotPresent(chromedp.CSS(row)))
}

// TestDashboardThreeNodes: the dashboard of any node of a three-node
// cluster lists three members, exactly one of them the leader, and each
// follower's last contact with it.
func TestDashboardThreeNodes(t *testing.T) {
	bctx := browser(t)
	urls := startCluster(t, 3)
	within(t, bctx, 30*time.Second, "three members, one leader",
		chromedp.Navigate(urls[2]+"/ui/"),
		chromedp.Poll[chromedp.Void](`document.querySelectorAll("#members tbody tr").length === 3 &&
			document.querySelectorAll('#members tbody tr[data-role="leader"]').length === 1 &&
			document.querySelectorAll('#members tbody tr[data-role="follower"]').length === 2 &&
			[...document.querySelectorAll('#members tbody tr[data-role="follower"] td.contact')].every((td) => td.textContent.endsWith(" ago"))`))
}

// startCluster runs n nodes on connected in-memory raft transports, each
// API on its own 127.0.0.1 port, and returns their URLs.
func startCluster(t *testing.T, n int) []string {
	t.Helper()
	type node struct {
		ln net.Listener
		tr *raft.InmemTransport
	}
	nodes := make([]*node, n)
	var peers []server.Peer
	for i := range nodes {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr, tr := raft.NewInmemTransport("")
		nodes[i] = &node{ln: ln, tr: tr}
		peers = append(peers, server.Peer{ID: fmt.Sprintf("n%d", i+1), RaftAddr: string(addr)})
	}
	var urls []string
	for i, nd := range nodes {
		for j, other := range nodes {
			if i != j {
				nd.tr.Connect(raft.ServerAddress(peers[j].RaftAddr), other.tr)
			}
		}
		cfg := server.DefaultConfig(t.TempDir(), nd.ln.Addr().String())
		cfg.Logger = servertest.Logger(t)
		cfg.Raft.NodeID = peers[i].ID
		cfg.Raft.Transport = nd.tr
		cfg.Raft.Bootstrap = peers
		cfg.Raft.HeartbeatTimeout = 100 * time.Millisecond
		cfg.Raft.ElectionTimeout = 100 * time.Millisecond
		cfg.Raft.LeaderLeaseTimeout = 50 * time.Millisecond
		s, err := server.Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- s.Serve(ctx, nd.ln) }()
		t.Cleanup(func() {
			cancel()
			<-served
			_ = s.Close()
		})
		urls = append(urls, "http://"+nd.ln.Addr().String())
	}
	return urls
}
