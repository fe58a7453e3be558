package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/harness/servertest"
	"github.com/leasehold/leasehold/internal/web"
)

// TestDashboardListsAPage: with one session and one lock more than a view
// lists (1000 of each), the state holds the first 1000 sessions in lease id
// order and the first 1000 locks in name order with the totals, and the
// dashboard shows exactly those rows and says how many exist.
func TestDashboardListsAPage(t *testing.T) {
	const n = 1001
	bctx := browser(t)
	c := servertest.Start(t, servertest.Options{})
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				resp, err := c.Client.CreateSession(ctxT(t), connect.NewRequest(&pb.CreateSessionRequest{TtlMs: 60_000, Owner: fmt.Sprintf("w-%04d", i)}))
				if err != nil {
					errs[i] = err
					continue
				}
				ids[i] = resp.Msg.GetLeaseId()
				_, errs[i] = c.Client.TryAcquire(ctxT(t), connect.NewRequest(&pb.TryAcquireRequest{Name: fmt.Sprintf("page/%04d", i), LeaseId: ids[i]}))
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		mustOK(t, fmt.Sprintf("session %d and its lock", i), err)
	}
	slices.Sort(ids)

	resp, err := c.HTTP.Get(c.URL + "/ui/api/state")
	mustOK(t, "GET /ui/api/state", err)
	var st web.State
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	mustOK(t, "decode the state", err)
	var gotIDs, gotNames []string
	for _, s := range st.Sessions {
		gotIDs = append(gotIDs, s.LeaseID)
	}
	for _, l := range st.Locks {
		gotNames = append(gotNames, l.Name)
	}
	if !slices.Equal(gotIDs, ids[:1000]) || !st.SessionsTruncated || st.SessionCount != n {
		t.Fatalf("state lists %d sessions (first %v), truncated %v, count %d; want the first 1000 of %d in lease id order",
			len(gotIDs), gotIDs[:min(len(gotIDs), 3)], st.SessionsTruncated, st.SessionCount, n)
	}
	if len(gotNames) != 1000 || gotNames[0] != "page/0000" || gotNames[999] != "page/0999" || !st.Truncated || st.LockCount != n {
		t.Fatalf("state lists %d locks, truncated %v, count %d; want page/0000 to page/0999 of %d", len(gotNames), st.Truncated, st.LockCount, n)
	}

	within(t, bctx, 20*time.Second, "open the dashboard",
		chromedp.Navigate(c.URL+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS(`#sessions-more`)),
		chromedp.WaitVisible(chromedp.CSS(`#locks-more`)))
	if got, want := text(t, bctx, "#sessions-more"), "Showing the first 1,000 of 1,001 sessions, in lease id order."; got != want {
		t.Errorf("sessions note = %q, want %q", got, want)
	}
	if got, want := text(t, bctx, "#locks-more"), "Showing the first 1,000 of 1,001 locks, in name order."; got != want {
		t.Errorf("locks note = %q, want %q", got, want)
	}
	ctx, cancel := context.WithTimeout(bctx, 5*time.Second)
	defer cancel()
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#sessions tbody tr")].map((r) => r.dataset.session)`))
	mustOK(t, "read the session rows", err)
	if !slices.Equal(rows, ids[:1000]) {
		t.Errorf("the dashboard lists %d sessions, want the first 1000 in lease id order", len(rows))
	}
}
