package browsertest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/harness/servertest"
	"github.com/leasehold/leasehold/internal/web"
)

// call sends a dashboard API request with tok ("" for none) and returns the
// status, the Leasehold-Code header and the body.
func call(t *testing.T, a authed, method, path, tok, body string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), method, a.c.URL+path, strings.NewReader(body))
	mustOK(t, "request "+path, err)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := a.c.HTTP.Do(req)
	mustOK(t, method+" "+path, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	mustOK(t, "read "+path, err)
	return resp.StatusCode, resp.Header.Get("Leasehold-Code"), b
}

// TestDashboardAPIByRole: the reader's state, feed and KV pages hold only
// names under its prefix and no lease id, sessions or members; holdings
// carry their grant time and queues their waiters in order with their
// mode; KV pages follow key order; only an admin ends a session.
func TestDashboardAPIByRole(t *testing.T) {
	a := startAuthed(t)
	lease := session(t, a.locks, 30000, "worker-A")
	tok := acquire(t, a.locks, "job:1", lease)
	acquire(t, a.locks, "secret:1", lease)
	for i := range 101 {
		_, err := a.locks.KvPut(ctxT(t), connect.NewRequest(&pb.KvPutRequest{Key: fmt.Sprintf("job:k%03d", i), Value: []byte("v"), Token: tok}))
		mustOK(t, "fenced write", err)
	}
	_, err := a.locks.KvPut(ctxT(t), connect.NewRequest(&pb.KvPutRequest{Key: "secret:k", Value: []byte("v"), Token: tok}))
	mustOK(t, "fenced write outside job:", err)

	// Two waiters queue behind worker-A: exclusive, then shared.
	qctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for _, w := range []struct {
		owner string
		mode  pb.LockMode
	}{{"waiter-X", pb.LockMode_LOCK_MODE_EXCLUSIVE}, {"waiter-S", pb.LockMode_LOCK_MODE_SHARED}} {
		id := session(t, a.locks, 30000, w.owner)
		wg.Go(func() {
			_, _ = a.locks.Acquire(qctx, connect.NewRequest(&pb.AcquireRequest{Name: "job:1", LeaseId: id, Mode: w.mode}))
		})
		if err := servertest.Eventually(5*time.Second, func() bool {
			st, err := a.locks.Status(ctxT(t), connect.NewRequest(&pb.StatusRequest{Name: "job:1"}))
			return err == nil && len(st.Msg.GetLock().GetWaiters()) > 0 && st.Msg.GetLock().GetWaiters()[len(st.Msg.GetLock().GetWaiters())-1].GetOwner() == w.owner
		}); err != nil {
			t.Fatalf("%s never queued", w.owner)
		}
	}

	code, _, body := call(t, a, http.MethodGet, "/ui/api/state", a.readerTok, "")
	var st web.State
	if code != http.StatusOK || json.Unmarshal(body, &st) != nil {
		t.Fatalf("reader's state: HTTP %d %s", code, body)
	}
	if len(st.Locks) != 1 || st.Locks[0].Name != "job:1" || len(st.Sessions) != 0 || len(st.Members) != 0 {
		t.Fatalf("reader's state lists locks %v, %d sessions, %d members; want job:1 alone", st.Locks, len(st.Sessions), len(st.Members))
	}
	l := st.Locks[0]
	h := l.Holders[0]
	if l.LeaseID != "" || h.LeaseID != "" || l.Queue[0].LeaseID != "" {
		t.Errorf("the reader sees a lease id: %+v", l)
	}
	if h.AcquiredUnixMs <= 0 || h.AcquiredUnixMs > st.NowMs {
		t.Errorf("holding granted at %d, view taken at %d: want a grant time before the view", h.AcquiredUnixMs, st.NowMs)
	}
	if q := fmt.Sprint(l.Queue); q != "[{ waiter-X exclusive "+fmt.Sprint(l.Queue[0].QueuedUnixMs)+"} { waiter-S shared "+fmt.Sprint(l.Queue[1].QueuedUnixMs)+"}]" {
		t.Errorf("queue = %s, want waiter-X (exclusive) then waiter-S (shared)", q)
	}
	code, _, body = call(t, a, http.MethodGet, "/ui/api/state", a.opsTok, "")
	if code != http.StatusOK || json.Unmarshal(body, &st) != nil || len(st.Locks) != 2 || st.Locks[0].LeaseID != lease || len(st.Members) != 1 {
		t.Fatalf("admin's state: HTTP %d, %d locks, lease id %q, %d members; want both locks, lease ids and the member", code, len(st.Locks), st.Locks[0].LeaseID, len(st.Members))
	}

	// The feed's backlog, up to the live mark, as the reader.
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodGet, a.c.URL+"/ui/api/events", nil)
	mustOK(t, "events request", err)
	req.Header.Set("Authorization", "Bearer "+a.readerTok)
	resp, err := a.c.HTTP.Do(req)
	mustOK(t, "events", err)
	sc := bufio.NewScanner(resp.Body)
	var names []string
	for sc.Scan() && sc.Text() != ": live" {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var ev web.Event
			mustOK(t, "decode event", json.Unmarshal([]byte(data), &ev))
			if ev.LeaseID != "" || !strings.HasPrefix(ev.Name, "job:") {
				t.Errorf("the reader's feed holds %+v", ev)
			}
			names = append(names, ev.Name)
		}
	}
	resp.Body.Close()
	if len(names) == 0 {
		t.Error("the reader's feed is empty")
	}

	var page web.KVPage
	code, _, body = call(t, a, http.MethodGet, "/ui/api/kv?prefix=", a.readerTok, "")
	if code != http.StatusOK || json.Unmarshal(body, &page) != nil || len(page.Keys) != 100 || page.Keys[0].Key != "job:k000" || page.Next != "job:k099" {
		t.Fatalf("reader's first KV page: HTTP %d, %d keys, next %q", code, len(page.Keys), page.Next)
	}
	if k := page.Keys[0]; k.Token != tok || k.Value != "v" || k.Size != 1 {
		t.Errorf("key %+v, want token %d and value v", k, tok)
	}
	code, _, body = call(t, a, http.MethodGet, "/ui/api/kv?after="+page.Next, a.readerTok, "")
	page = web.KVPage{}
	if code != http.StatusOK || json.Unmarshal(body, &page) != nil || len(page.Keys) != 1 || page.Keys[0].Key != "job:k100" || page.Next != "" {
		t.Fatalf("reader's last KV page: HTTP %d %s; want job:k100 alone", code, body)
	}

	end := fmt.Sprintf(`{"lease_id":%q}`, lease)
	for _, who := range []struct{ what, tok string }{{"anonymous", ""}, {"reader", a.readerTok}, {"a wrong token", "lh.0000000000000000." + strings.Repeat("0", 64)}} {
		if code, ec, _ := call(t, a, http.MethodPost, "/ui/api/end-session", who.tok, end); code != http.StatusForbidden || ec != "permission-denied" {
			t.Errorf("%s ends a session: HTTP %d %q, want 403 permission-denied", who.what, code, ec)
		}
	}
	if code, ec, _ := call(t, a, http.MethodGet, "/ui/api/state", "", ""); code != http.StatusForbidden || ec != "permission-denied" {
		t.Errorf("anonymous state: HTTP %d %q, want 403 permission-denied", code, ec)
	}
	if code, _, body := call(t, a, http.MethodPost, "/ui/api/end-session", a.opsTok, end); code != http.StatusOK {
		t.Fatalf("admin ends the session: HTTP %d %s", code, body)
	}
	s, err := a.locks.Status(ctxT(t), connect.NewRequest(&pb.StatusRequest{Name: "secret:1"}))
	mustOK(t, "status", err)
	if s.Msg.GetLock().GetHolder() != nil {
		t.Error("secret:1 is still held after its session ended")
	}
}
