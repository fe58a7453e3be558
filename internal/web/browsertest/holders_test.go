package browsertest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/clock"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// TestDashboardShowsEveryHolder: a read lock held by two readers and a
// semaphore with two of three permits taken each show every holder, with
// its owner, token and mode (or permit slot), not only the first.
func TestDashboardShowsEveryHolder(t *testing.T) {
	bctx := browser(t)
	c := servertest.Start(t, servertest.Options{Clock: clock.NewManual(time.Now())})
	cl := c.Client
	within(t, bctx, 20*time.Second, "open the dashboard",
		chromedp.Navigate(c.URL+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS(`#conn.conn-up`)))

	take := func(name, owner string, m *pb.TryAcquireRequest) uint64 {
		t.Helper()
		m.Name, m.LeaseId = name, session(t, cl, 60_000, owner)
		resp, err := cl.TryAcquire(ctxT(t), connect.NewRequest(m))
		mustOK(t, "TryAcquire "+name+" by "+owner, err)
		return resp.Msg.GetHolding().GetToken()
	}
	type holder struct {
		owner string
		token uint64
		mode  string
	}
	var readers, permits []holder
	for _, o := range []string{"reader-1", "reader-2"} {
		readers = append(readers, holder{o, take("cfg", o, &pb.TryAcquireRequest{Mode: pb.LockMode_LOCK_MODE_SHARED}), "shared"})
	}
	for _, o := range []string{"permit-1", "permit-2"} {
		permits = append(permits, holder{o, take("pool", o, &pb.TryAcquireRequest{Permits: 3}), "exclusive"})
	}

	for name, hs := range map[string][]holder{"cfg": readers, "pool": permits} {
		row := fmt.Sprintf(`#locks tr[data-lock=%q]`, name)
		within(t, bctx, 2*time.Second, name+" shows both holders",
			chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`%s[data-holders="%d"]`, row, len(hs)))))
		for _, h := range hs {
			sel := fmt.Sprintf(`%s td.owner div.holder[data-token="%d"][data-mode=%q]`, row, h.token, h.mode)
			within(t, bctx, time.Second, fmt.Sprintf("%s holder %s", name, h.owner), chromedp.WaitVisible(chromedp.CSS(sel)))
			if got := text(t, bctx, sel); !strings.HasPrefix(got, h.owner) {
				t.Errorf("%s holder with token %d = %q, want %s", name, h.token, got, h.owner)
			}
			tok := fmt.Sprintf(`%s td.token div.holder-token[data-token="%d"]`, row, h.token)
			if got := text(t, bctx, tok); got != fmt.Sprint(h.token) {
				t.Errorf("%s token cell for %s = %q, want %d", name, h.owner, got, h.token)
			}
		}
	}
	if got := text(t, bctx, `#locks tr[data-lock="cfg"] td.owner`); !strings.Contains(got, "reader-1 · shared") || !strings.Contains(got, "reader-2 · shared") {
		t.Errorf("read lock owners = %q, want both readers marked shared", got)
	}
	if got := text(t, bctx, `#locks tr[data-lock="pool"] td.name`); !strings.Contains(got, "2/3 permits") {
		t.Errorf("semaphore name cell = %q, want 2/3 permits", got)
	}
}
