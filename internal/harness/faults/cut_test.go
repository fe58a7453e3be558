//go:build leasehold_faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/harness/cutreply"
)

// cutEvery is the share of unary replies, and of lock-stream answers, a
// cutProxy cuts: one in cutEvery.
const cutEvery = 4

// cutProxy is an HTTP/2 (h2c) reverse proxy in front of one node's API.
// One in cutEvery unary replies is cut after its headers: the request ran
// to completion on the node, the caller gets the response headers and the
// first bytes of the body, and then the stream is reset. One in cutEvery
// answers on a lock stream, drawn at random (so that the answer to a
// request's retry on a new stream is lost at times too), is swallowed and
// the stream reset with every request still in flight on it (the node's
// handler is cancelled). The other streams (keepalive, watch, snapshot)
// pass untouched.
type cutProxy struct {
	addr string // where clients connect
	srv  *http.Server
	tr   *http.Transport
	rp   *httputil.ReverseProxy
	done chan struct{} // closed when Serve returned

	unary atomic.Int64 // unary calls seen
	cuts  atomic.Int64 // replies cut

	answers    atomic.Int64 // lock-stream answers seen
	streamCuts atomic.Int64 // lock-stream answers cut (each reset its stream)
	unreset    atomic.Int64 // lock-stream requests read after their stream's cut
}

// readAfterCut counts the reads of a lock stream's request body that
// returned data after the stream's cut: a stream the cut resets reads
// nothing more (a keeper sends its next lock operation only after it has
// the answer to the last, or a reset), while a stream left open reads the
// caller's next message (the cancel it sends at its deadline).
type readAfterCut struct {
	io.ReadCloser
	cut *atomic.Bool
	n   *atomic.Int64
}

func (r *readAfterCut) Read(b []byte) (int, error) {
	n, err := r.ReadCloser.Read(b)
	if n > 0 && r.cut.Load() {
		r.n.Add(1)
	}
	return n, err
}

// newCutProxy serves a cutProxy to target (host:port) on a free
// 127.0.0.1 port until close.
func newCutProxy(target string) (*cutProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	p := &cutProxy{addr: ln.Addr().String(), tr: &http.Transport{Protocols: &h2c}, done: make(chan struct{})}
	to := &url.URL{Scheme: "http", Host: target}
	p.rp = &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(to) },
		Transport:     p.tr,
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
	}
	var both http.Protocols
	both.SetHTTP1(true)
	both.SetUnencryptedHTTP2(true)
	p.srv = &http.Server{Handler: p, Protocols: &both, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() {
		defer close(p.done)
		_ = p.srv.Serve(ln)
	}()
	return p, nil
}

// streams are the procedures that stream and are never cut.
var streams = []string{"/KeepAliveStream", "/Watch", "/Snapshot"}

func (p *cutProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/LockStream") {
		var cut atomic.Bool
		r.Body = &readAfterCut{ReadCloser: r.Body, cut: &cut, n: &p.unreset}
		cutreply.ServeStream(p.rp, w, r, func([]byte) bool {
			if p.answers.Add(1); rand.N(cutEvery) != 0 {
				return false
			}
			p.streamCuts.Add(1)
			cut.Store(true)
			return true
		})
		return
	}
	for _, s := range streams {
		if strings.HasSuffix(r.URL.Path, s) {
			p.rp.ServeHTTP(w, r)
			return
		}
	}
	if p.unary.Add(1)%cutEvery != 0 {
		p.rp.ServeHTTP(w, r)
		return
	}
	p.cuts.Add(1)
	cutreply.Serve(p.rp, w, r)
}

// close stops the proxy and waits for it.
func (p *cutProxy) close() {
	_ = p.srv.Close()
	<-p.done
	p.tr.CloseIdleConnections()
}

// TestCutReplies: replies cut after their headers. Client processes reach the
// nodes only through cutProxies, which cut one in cutEvery unary replies
// after the request ran on the node, and break lock streams at one in
// cutEvery of their answers; half the keepers send their lock operations
// on the lock stream, half as unary calls. Every failure that may have applied
// must say outcome-unknown, never internal (P11); no token goes back
// (P2); no acknowledged write is lost (P4); and a grant whose acquire
// came back unclear is not kept by a session that never learned it: the
// client withdraws it, so the name is free again or held by a session
// that learned the grant.
func TestCutReplies(t *testing.T) {
	c := startCluster(t)
	ctx := t.Context()
	o := observe(c.endpoints(), "f:", names)
	var cnt counters
	var proxies []*cutProxy
	var eps []string
	for _, n := range c.nodes {
		p, err := newCutProxy(n.apiAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer p.close()
		proxies = append(proxies, p)
		eps = append(eps, p.addr)
	}
	// Keepers: workers whose sessions (TTL 10 s) outlive them, so that
	// what they hold when they stop can be read back. Two send their lock
	// operations as unary calls (k*), two on the lock stream (s*).
	until := time.Now().Add(15 * time.Second)
	var ps []*proc
	for i := range 4 {
		mode, id := "keeper", fmt.Sprintf("k%d", i)
		if i%2 == 1 {
			mode, id = "stream-keeper", fmt.Sprintf("s%d", i)
		}
		ps = append(ps, spawn(t, mode, id, strings.Join(eps, ","), names, 10*time.Second, until))
	}
	waitAll(t, ps, time.Until(until)+10*time.Second)
	var recs []rec
	for _, p := range ps {
		recs = append(recs, p.records(t)...)
	}

	// No grant nobody learned is kept: every name is free or held by a
	// grant a client learned, while the keepers' sessions still live.
	cl, err := client.Dial(ctx, c.endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, v := range unlearnedHeld(ctx, t, cl, names, recs) {
		t.Error(v)
	}
	for lease := range leasesOf(recs) {
		if _, err := cl.CloseSessionID(ctx, lease); err != nil && !errors.Is(err, client.ErrLeaseExpired) && !errors.Is(err, client.ErrNotFound) {
			t.Logf("close session %s: %v", lease, err)
		}
	}

	h := collect(t, o, c.endpoints(), names, ps)
	for _, v := range unlearnedKept(h) {
		t.Error(v)
	}
	var cuts, unary, streamCuts, answers, unreset int64
	for _, p := range proxies {
		cuts += p.cuts.Load()
		unary += p.unary.Load()
		streamCuts += p.streamCuts.Load()
		answers += p.answers.Load()
		unreset += p.unreset.Load()
	}
	if unreset > 0 {
		t.Errorf("%d lock-stream requests were read after their stream's answer was cut: the cut left the stream open, so the caller waited out its deadline instead of learning of the break", unreset)
	}
	unknown, streamUnknown, streamOps := 0, 0, 0
	for _, r := range h.recs {
		stream := strings.HasPrefix(r.Proc, "s")
		if stream && (r.K == "grant" || r.K == "release" || r.Op == "acquire" || r.Op == "release") {
			streamOps++
		}
		if r.Code == "outcome-unknown" {
			unknown++
			if stream && (r.Op == "acquire" || r.Op == "release") {
				streamUnknown++
			}
		}
	}
	t.Logf("replies cut %d of %d unary calls; lock-stream answers cut %d of %d; outcome-unknown seen by clients %d (%d of them lock operations on the stream, of %d such operations)",
		cuts, unary, streamCuts, answers, unknown, streamUnknown, streamOps)
	if cuts == 0 || unknown == 0 {
		t.Errorf("coverage: replies cut %d, outcome-unknown errors %d: the cuts did not bite", cuts, unknown)
	}
	if streamCuts == 0 || streamOps == 0 || streamUnknown == 0 {
		t.Errorf("coverage: lock-stream answers cut %d, lock operations of stream-keepers %d, of them outcome-unknown %d: the stream cuts did not bite", streamCuts, streamOps, streamUnknown)
	}
	cnt.snapshotInstalls = c.snapshotInstalls()
	report(t, h, &cnt, o)
}

// leasesOf is the set of sessions recs name.
func leasesOf(recs []rec) map[string]bool {
	out := map[string]bool{}
	for _, r := range recs {
		if r.Lease != "" {
			out[r.Lease] = true
		}
	}
	return out
}

// learned is the set of "lease/token" grants a client was told of.
func learned(recs []rec) map[string]bool {
	out := map[string]bool{}
	for _, r := range recs {
		if r.K == "grant" {
			out[fmt.Sprintf("%s/%d", r.Lease, r.Token)] = true
		}
	}
	return out
}

// unclear is the set of "lease/name" pairs whose acquire failed with
// outcome-unknown: the client said it may hold the name.
func unclear(recs []rec) map[string]bool {
	out := map[string]bool{}
	for _, r := range recs {
		if r.K == "error" && r.Op == "acquire" && r.Code == "outcome-unknown" {
			out[r.Lease+"/"+r.Name] = true
		}
	}
	return out
}

// unlearnedHeld reads each name's holder and returns a violation for a
// name held by a grant no client learned, unless its acquire said
// outcome-unknown.
func unlearnedHeld(ctx context.Context, t *testing.T, cl *client.Client, names []string, recs []rec) []string {
	t.Helper()
	known, maybe := learned(recs), unclear(recs)
	var bad []string
	for _, n := range names {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := cl.Status(sctx, n)
		cancel()
		if err != nil {
			t.Fatalf("status %s: %v", n, err)
		}
		h := info.GetHolder()
		if h == nil {
			continue
		}
		k := fmt.Sprintf("%s/%d", h.GetLeaseId(), h.GetToken())
		if !known[k] && !maybe[h.GetLeaseId()+"/"+n] {
			bad = append(bad, fmt.Sprintf("P11: %s is held by session %s with token %d, a grant no client learned (its acquire did not say outcome-unknown)", n, h.GetLeaseId(), h.GetToken()))
		}
	}
	return bad
}

// unlearnedKept checks the committed stream: a grant no client learned
// must be released (withdrawn by the client) before its session is
// granted anything else, unless its acquire said outcome-unknown. A
// worker asks for one name at a time, so its next grant comes after the
// unclear acquire returned.
func unlearnedKept(h *history) []string {
	known, maybe := learned(h.recs), unclear(h.recs)
	pending := map[string]map[string]uint64{} // lease → name → unlearned token
	var bad []string
	for _, ev := range h.events {
		l, n := ev.GetLeaseId(), ev.GetName()
		switch ev.GetType() {
		case pb.EventType_EVENT_TYPE_ACQUIRED:
			for pn, tok := range pending[l] {
				if len(bad) < 20 {
					bad = append(bad, fmt.Sprintf("P11: session %s was granted %s (index %d) while it still held %s by token %d, a grant no client learned", l, n, ev.GetIndex(), pn, tok))
				}
				delete(pending[l], pn)
			}
			if !known[fmt.Sprintf("%s/%d", l, ev.GetToken())] && !maybe[l+"/"+n] {
				if pending[l] == nil {
					pending[l] = map[string]uint64{}
				}
				pending[l][n] = ev.GetToken()
			}
		case pb.EventType_EVENT_TYPE_RELEASED, pb.EventType_EVENT_TYPE_EXPIRED:
			delete(pending[l], n)
		}
	}
	return bad
}

// TestUnlearnedCheckCatches feeds unlearnedKept a grant nobody learned
// that its session kept, one it withdrew, and one whose acquire said
// outcome-unknown.
func TestUnlearnedCheckCatches(t *testing.T) {
	ev := func(typ pb.EventType, idx, tok uint64, name, lease string) *pb.Event {
		return &pb.Event{Type: typ, Index: idx, Token: tok, Name: name, LeaseId: lease}
	}
	acq, rel := pb.EventType_EVENT_TYPE_ACQUIRED, pb.EventType_EVENT_TYPE_RELEASED
	grant := rec{K: "grant", Name: "b", Lease: "l1", Token: 2}
	kept := &history{recs: []rec{grant}, events: []*pb.Event{ev(acq, 1, 1, "a", "l1"), ev(acq, 2, 2, "b", "l1")}}
	if bad := unlearnedKept(kept); len(bad) != 1 || !strings.HasPrefix(bad[0], "P11") {
		t.Errorf("a kept grant nobody learned: %q, want one P11 violation", bad)
	}
	withdrawn := &history{recs: []rec{grant}, events: []*pb.Event{ev(acq, 1, 1, "a", "l1"), ev(rel, 2, 0, "a", "l1"), ev(acq, 3, 2, "b", "l1")}}
	if bad := unlearnedKept(withdrawn); len(bad) > 0 {
		t.Errorf("a withdrawn grant: %q", bad)
	}
	said := &history{recs: []rec{grant, {K: "error", Op: "acquire", Name: "a", Lease: "l1", Code: "outcome-unknown"}}, events: kept.events}
	if bad := unlearnedKept(said); len(bad) > 0 {
		t.Errorf("a grant whose acquire said outcome-unknown: %q", bad)
	}
}
