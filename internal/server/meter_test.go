package server_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/admission"
	"github.com/leasehold/leasehold/internal/harness/servertest"
	"github.com/leasehold/leasehold/internal/server"
	"github.com/leasehold/leasehold/internal/validate"
)

// refusedCount is leasehold_limit_refused_total{limit} on c (0 when the
// limit has refused nothing yet).
func refusedCount(t *testing.T, c *servertest.Cluster, limit string) int {
	t.Helper()
	series := `leasehold_limit_refused_total{limit="` + limit + `"}`
	m := scrape(t, c)
	if !strings.Contains(m, series+" ") {
		return 0
	}
	n, err := strconv.ParseFloat(sample(t, m, series), 64)
	mustOK(t, "parse "+series, err)
	return int(n)
}

// holdLocks makes n locks named prefix0… held by one session of cl.
func holdLocks(t *testing.T, cl client, prefix string, n int) {
	t.Helper()
	lease := newSession(t, cl, 3_600_000, "holder").GetLeaseId()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, err := cl.TryAcquire(ctxT(t), req(&pb.TryAcquireRequest{Name: fmt.Sprint(prefix, i), LeaseId: lease}))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		mustOK(t, "TryAcquire", err)
	}
}

func list(cl client, prefix string) (int, error) {
	res, err := cl.List(context.Background(), req(&pb.ListRequest{Prefix: prefix}))
	if err != nil {
		return 0, err
	}
	return len(res.Msg.GetLocks()), nil
}

// TestMeterList: List, ListSessions and a watch's compacted state are
// charged the entries they return against one bucket per principal; an
// empty bucket refuses them with resource-exhausted naming list-rate,
// until it refills; another principal is not affected.
func TestMeterList(t *testing.T) {
	c, clk := startManual(t, servertest.Options{Configure: func(cfg *server.Config) {
		cfg.Limits.ListRate, cfg.Limits.ListBurst = 100, 100
		cfg.WatchHistory = 4
	}})
	rt := h2c()
	t.Cleanup(rt.CloseIdleConnections)
	a, b := as(c, rt, "a"), as(c, rt, "b")
	holdLocks(t, c.Client, "l:", 30)

	// 100 entries: three Lists of 30 leave 10, the fourth is admitted on
	// them and leaves a debt, the fifth is refused.
	for i := range 4 {
		n, err := list(a, "l:")
		mustOK(t, fmt.Sprint("List ", i), err)
		if n != 30 {
			t.Fatalf("List %d returned %d locks, want 30", i, n)
		}
	}
	before := refusedCount(t, c, "list-rate")
	_, err := list(a, "l:")
	wantLimit(t, "List 5", err, "list-rate")
	if got := refusedCount(t, c, "list-rate"); got != before+1 {
		t.Fatalf("leasehold_limit_refused_total{limit=\"list-rate\"} went from %d to %d, want one more", before, got)
	}
	_, err = a.ListSessions(ctxT(t), req(&pb.ListSessionsRequest{}))
	wantLimit(t, "ListSessions of a", err, "list-rate")
	_, err = a.List(ctxT(t), req(&pb.ListRequest{Prefix: "l:", Stale: true}))
	wantLimit(t, "a stale List of a", err, "list-rate")

	// A watch that fell out of the history would be sent the state: it
	// is refused instead, for a but not for b.
	st, err := a.Watch(ctxT(t), req(&pb.WatchRequest{Prefix: "l:", FromIndex: 1}))
	mustOK(t, "Watch of a", err)
	if st.Receive() {
		t.Fatalf("a's compacted watch got %v, want it refused", st.Msg())
	}
	wantLimit(t, "a's compacted watch", st.Err(), "list-rate")

	n, err := list(b, "l:")
	mustOK(t, "List of b", err)
	if n != 30 {
		t.Fatalf("b's List returned %d locks, want 30", n)
	}
	_, err = b.ListSessions(ctxT(t), req(&pb.ListSessionsRequest{}))
	mustOK(t, "ListSessions of b", err)
	st, err = b.Watch(ctxT(t), req(&pb.WatchRequest{Prefix: "l:", FromIndex: 1}))
	mustOK(t, "Watch of b", err)
	if !st.Receive() || len(st.Msg().GetCompacted().GetLocks()) != 30 {
		t.Fatalf("b's compacted watch got %v (%v), want the state of 30 locks", st.Msg(), st.Err())
	}
	wantCode(t, "b's compacted watch", func() error { st.Receive(); return st.Err() }(), api.CodeCompacted)

	// a's debt (4·30 − 100 = 20) is repaid after 0.2 s; one more entry
	// is needed to be admitted.
	clk.Advance(200 * time.Millisecond)
	_, err = list(a, "l:")
	wantLimit(t, "List of a with the debt repaid", err, "list-rate")
	clk.Advance(100 * time.Millisecond)
	_, err = list(a, "l:")
	mustOK(t, "List of a after 0.3 s", err)
}

// TestMeterListDefaults: with the default limits a dashboard listing 1 000
// locks five times a second is never refused; the same principal listing
// in a loop is.
func TestMeterListDefaults(t *testing.T) {
	c, clk := startManual(t, servertest.Options{})
	holdLocks(t, c.Client, "d:", validate.MaxListLimit)
	for i := range 50 { // 10 s of a dashboard
		n, err := list(c.Client, "d:")
		mustOK(t, fmt.Sprint("dashboard List ", i), err)
		if n != validate.MaxListLimit {
			t.Fatalf("List returned %d locks, want %d", n, validate.MaxListLimit)
		}
		clk.Advance(200 * time.Millisecond)
	}
	for i := range 100 { // a loop, faster than the clock moves
		if _, err := list(c.Client, "d:"); err != nil {
			wantLimit(t, fmt.Sprint("looped List ", i), err, "list-rate")
			if i < 20 {
				t.Fatalf("refused after %d full Lists, want the burst of 20", i)
			}
			return
		}
	}
	t.Fatal("100 full Lists in a loop were all admitted")
}

// openWatch opens a watch that asks for progress, so that an admitted
// watch answers at once, and reports its first answer.
func openWatch(ctx context.Context, cl client) error {
	st, err := cl.Watch(ctx, req(&pb.WatchRequest{Prefix: "w:", ProgressNotify: true}))
	if err != nil {
		return err
	}
	context.AfterFunc(ctx, func() { _ = st.Close() })
	if !st.Receive() {
		return st.Err()
	}
	return nil
}

// TestMeterWatchOpens: opening Watch streams is metered per principal,
// besides the caps on open streams.
func TestMeterWatchOpens(t *testing.T) {
	c, clk := startManual(t, withLimits(func(l *admission.Limits) { l.WatchOpenRate, l.WatchOpenBurst = 1, 3 }))
	rt := h2c()
	t.Cleanup(rt.CloseIdleConnections)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	a, b := as(c, rt, "a"), as(c, rt, "b")
	for i := range 3 {
		mustOK(t, fmt.Sprint("watch ", i, " of a"), openWatch(ctx, a))
	}
	wantLimit(t, "watch 4 of a", openWatch(ctx, a), "watch-open-rate")
	if n := refusedCount(t, c, "watch-open-rate"); n != 1 {
		t.Fatalf("leasehold_limit_refused_total{limit=\"watch-open-rate\"} = %d, want 1", n)
	}
	mustOK(t, "watch of b", openWatch(ctx, b))
	clk.Advance(time.Second)
	mustOK(t, "watch of a after 1 s", openWatch(ctx, a))
	wantLimit(t, "the next watch of a", openWatch(ctx, a), "watch-open-rate")
}

// TestMeterRotatingAuthorization: with auth off a bearer token is not
// verified, so a client that sends a new Authorization header with each
// request is still the one principal of its address.
func TestMeterRotatingAuthorization(t *testing.T) {
	c := servertest.Start(t, withLimits(func(l *admission.Limits) { l.WatchesPerPrincipal = 3 }))
	rt := h2c()
	t.Cleanup(rt.CloseIdleConnections)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	for i := range 5 {
		cl := leaseholdv1connect.NewLeaseholdServiceClient(&http.Client{Transport: bearer{rt, fmt.Sprint("rotating-", i)}}, c.URL, connect.WithGRPC())
		err := openWatch(ctx, cl)
		if i < 3 {
			mustOK(t, fmt.Sprint("watch ", i), err)
			continue
		}
		wantLimit(t, fmt.Sprint("watch ", i, " with another bearer token"), err, "watches-per-principal")
	}
	// The same from another address is another principal.
	mustOK(t, "watch from another address", openWatch(ctx, as(c, rt, "elsewhere")))
}

// keepAlive renews ids in one KeepAlive.
func keepAlive(cl client, ids []string) error {
	_, err := cl.KeepAlive(context.Background(), req(&pb.KeepAliveRequest{LeaseIds: ids}))
	return err
}

// TestMeterRenewals: KeepAlive and each KeepAliveStream message are
// charged one unit per lease id; beyond renew-rate a KeepAlive is refused
// with resource-exhausted, and a stream's message is answered with that
// code for each id while the stream stays open.
func TestMeterRenewals(t *testing.T) {
	c, clk := startManual(t, withLimits(func(l *admission.Limits) { l.RenewRate, l.RenewBurst = 10, 10 }))
	rt := h2c()
	t.Cleanup(rt.CloseIdleConnections)
	a, b := as(c, rt, "a"), as(c, rt, "b")
	var ids []string
	for range 8 {
		ids = append(ids, newSession(t, a, 60_000, "a").GetLeaseId())
	}
	mustOK(t, "renew 8 (8 of 10)", keepAlive(a, ids))
	mustOK(t, "renew 8 more (on the 2 left)", keepAlive(a, ids))
	wantLimit(t, "renew in debt", keepAlive(a, ids[:1]), "renew-rate")
	_, err := a.KeepAlive(ctxT(t), req(&pb.KeepAliveRequest{LeaseId: ids[0]}))
	wantLimit(t, "renew one id in debt", err, "renew-rate")
	bid := newSession(t, b, 60_000, "b").GetLeaseId()
	mustOK(t, "renewals of b", keepAlive(b, []string{bid, bid, bid, bid, bid, bid, bid, bid}))

	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	st := a.KeepAliveStream(ctx)
	defer func() { _ = st.CloseRequest(); _ = st.CloseResponse() }()
	send := func(m *pb.KeepAliveStreamRequest) *pb.KeepAliveStreamResponse {
		t.Helper()
		mustOK(t, "Send", st.Send(m))
		res, err := st.Receive()
		mustOK(t, "Receive", err)
		return res
	}
	res := send(&pb.KeepAliveStreamRequest{LeaseIds: ids})
	for i, r := range res.GetResults() {
		if r.GetLeaseId() != ids[i] || r.GetErrorCode() != string(api.CodeResourceExhausted) {
			t.Fatalf("stream renewal in debt: result %d is %v, want %s refused with resource-exhausted", i, r, ids[i])
		}
	}
	if len(res.GetResults()) != len(ids) {
		t.Fatalf("stream renewal in debt: %d results, want %d", len(res.GetResults()), len(ids))
	}
	if res = send(&pb.KeepAliveStreamRequest{LeaseId: ids[0]}); res.GetErrorCode() != string(api.CodeResourceExhausted) {
		t.Fatalf("stream renewal of one id in debt: %v, want resource-exhausted", res)
	}
	if n := refusedCount(t, c, "renew-rate"); n != 4 {
		t.Fatalf("leasehold_limit_refused_total{limit=\"renew-rate\"} = %d, want 4", n)
	}
	// The debt of 6 is repaid after 0.6 s; then the same stream renews.
	clk.Advance(700 * time.Millisecond)
	res = send(&pb.KeepAliveStreamRequest{LeaseIds: ids})
	for i, r := range res.GetResults() {
		if r.GetErrorCode() != "" || r.GetTtlMs() != 60_000 {
			t.Fatalf("stream renewal after 0.7 s: result %d is %v, want renewed", i, r)
		}
	}
	wantLimit(t, "renew after the stream's 8", keepAlive(a, ids[:1]), "renew-rate")
	clk.Advance(time.Second)
	mustOK(t, "renew after 1 s more", keepAlive(a, ids))
}

// headers sets h on every request it sends through rt.
type headers struct {
	rt http.RoundTripper
	h  map[string]string
}

func (x headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range x.h {
		r.Header.Set(k, v)
	}
	return x.rt.RoundTrip(r)
}

// TestMeterForgedForwardedPrincipal: on a node that can tell nodes from
// clients (here by the node secret), a client that claims to forward for
// another principal (Leasehold-Forwarded-By, Leasehold-Principal) with
// auth off is still the principal of its address.
func TestMeterForgedForwardedPrincipal(t *testing.T) {
	c := servertest.Start(t, servertest.Options{Configure: func(cfg *server.Config) {
		cfg.NodeSecret = "s3cret-of-the-nodes"
		cfg.Limits.WatchesPerPrincipal = 3
	}})
	rt := h2c()
	t.Cleanup(rt.CloseIdleConnections)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	for i := range 5 {
		h := headers{rt, map[string]string{"Leasehold-Forwarded-By": "n9", "Leasehold-Principal": fmt.Sprint("ip:10.9.9.", i)}}
		cl := leaseholdv1connect.NewLeaseholdServiceClient(&http.Client{Transport: h}, c.URL, connect.WithGRPC())
		err := openWatch(ctx, cl)
		if i < 3 {
			mustOK(t, fmt.Sprint("watch ", i), err)
			continue
		}
		wantLimit(t, fmt.Sprint("watch ", i, " claiming to be forwarded for another principal"), err, "watches-per-principal")
	}
}

// sourceAddrs gives each principal name of the tests a loopback address of
// its own, 127.1.x.y (Linux routes all of 127.0.0.0/8 to the loopback).
var sourceAddrs = struct {
	sync.Mutex
	by map[string]string
}{by: map[string]string{}}

func sourceAddr(who string) string {
	sourceAddrs.Lock()
	defer sourceAddrs.Unlock()
	a, ok := sourceAddrs.by[who]
	if !ok {
		n := len(sourceAddrs.by) + 1
		a = fmt.Sprintf("127.1.%d.%d", n/250, n%250+1)
		sourceAddrs.by[who] = a
	}
	return a
}

// fromAddr sends requests to a host name that names the local address
// to dial from ("127-1-0-7.from.test"), so that its transport keeps their
// connections apart from other addresses' and h2c's dialer binds the
// address (dialFrom). The Host header stays the server's.
type fromAddr struct {
	rt   http.RoundTripper
	addr string
}

const fromSuffix = ".from.test"

func (f fromAddr) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Host = r.URL.Host
	r.URL.Host = strings.ReplaceAll(f.addr, ".", "-") + fromSuffix + ":" + r.URL.Port()
	return f.rt.RoundTrip(r)
}

// dialFrom dials addr; a host name made by fromAddr is dialled at
// 127.0.0.1 (where test servers listen) from the address it names.
func dialFrom(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	var d net.Dialer
	if src, ok := strings.CutSuffix(host, fromSuffix); ok && err == nil {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(strings.ReplaceAll(src, "-", "."))}
		addr = net.JoinHostPort("127.0.0.1", port)
	}
	return d.DialContext(ctx, network, addr)
}

// TestMeterWatchEvents: the events sent to one principal's Watch streams
// are paced at watch-event-rate: past its burst a stream waits (and gets
// every event, in order, once the rate allows), while another
// principal's stream of the same prefix is sent each event at once.
func TestMeterWatchEvents(t *testing.T) {
	c, clk := startManual(t, withLimits(func(l *admission.Limits) { l.WatchEventRate, l.WatchEventBurst = 1, 1 }))
	rt := h2c()
	t.Cleanup(rt.CloseIdleConnections)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	names := func(cl client) <-chan string {
		st, err := cl.Watch(ctx, req(&pb.WatchRequest{Prefix: "we:"}))
		mustOK(t, "watch", err)
		context.AfterFunc(ctx, func() { _ = st.Close() })
		st.ResponseHeader() // the watch is registered
		ch := make(chan string, 16)
		go func() {
			for st.Receive() {
				if ev := st.Msg().GetEvent(); ev.GetType() == pb.EventType_EVENT_TYPE_ACQUIRED {
					ch <- ev.GetName()
				}
			}
		}()
		return ch
	}
	a := names(as(c, rt, "a"))
	s := newSession(t, c.Client, 60_000, "S").GetLeaseId()
	got := func(ch <-chan string, want string) {
		t.Helper()
		select {
		case name := <-ch:
			if name != want {
				t.Fatalf("event of %s, want %s", name, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event of %s", want)
		}
	}
	for i := range 2 { // the burst, then one more: a's bucket is in debt
		acquire(t, c.Client, fmt.Sprint("we:", i), s)
		got(a, fmt.Sprint("we:", i))
	}
	b := names(as(c, rt, "b"))
	acquire(t, c.Client, "we:2", s)
	got(b, "we:2")
	select {
	case name := <-a:
		t.Fatalf("a was sent %s while its watch-event-rate was spent", name)
	case <-time.After(300 * time.Millisecond):
	}
	clk.Advance(time.Second)
	got(a, "we:2")
}
