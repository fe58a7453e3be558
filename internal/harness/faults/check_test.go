//go:build leasehold_faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/client"
)

// history is everything a schedule's clients and observer saw.
type history struct {
	recs   []rec       // client operations (grants, puts, releases, errors)
	reads  []rec       // the observer's linearizable reads
	status []rec       // the observer's linearizable status reads
	events []*pb.Event // lock events in commit order
	// resyncs are the states the watch resynced to where its events were
	// no longer held (gaps): each replaces every event before its position
	// in events.
	resyncs []resync
	final   map[string]rec // each key's value and token after the run
}

// collect gathers the records of procs and of the parent (extra), stops
// the observer and reads the final state of keys through eps.
func collect(t *testing.T, o *observer, eps string, keys []string, procs []*proc, extra ...rec) *history {
	t.Helper()
	h := &history{recs: extra, final: map[string]rec{}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, eps)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// P8: after the faults every name is granted to a fresh session within
	// TTL + grace + 1 s (a holder the faults left behind expires first).
	s, err := c.NewSession(ctx, client.WithTTL(5*time.Second), client.WithOwner("liveness"))
	if err != nil {
		t.Fatalf("P8: no session after the faults: %v", err)
	}
	var last uint64
	for _, k := range keys {
		sent := time.Now()
		actx, cancel := context.WithTimeout(ctx, regrantBound(workerTTL))
		l, err := s.Acquire(actx, k)
		cancel()
		if err != nil {
			t.Errorf("P8: %s not granted within %v after the faults: %v", k, regrantBound(workerTTL), err)
			continue
		}
		last = l.Token()
		h.recs = append(h.recs, rec{K: "grant", Proc: "liveness", Name: k, Lease: l.LeaseID(), Token: l.Token(), Sent: sent.UnixNano(), Ret: time.Now().UnixNano()})
	}
	if err := s.Close(ctx); err != nil {
		t.Error(err)
	}
	// The observer has seen the last grant: the stream is complete.
	for o.lastToken() < last && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	o.close()
	for _, p := range procs {
		h.recs = append(h.recs, p.records(t)...)
	}
	h.events, h.resyncs, h.reads = o.events, o.resyncs, o.reads
	h.status = o.statuses
	for _, v := range o.violations {
		t.Error(v)
	}
	for _, k := range keys {
		for {
			v, tok, err := c.KVGet(ctx, k)
			if errors.Is(err, client.ErrNotFound) {
				break
			}
			if err == nil {
				h.final[k] = rec{Name: k, Token: tok, Value: string(v)}
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("final read of %s: %v", k, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return h
}

// check verifies P2, P4, P6 (on the event stream) and P11 on h, fills the
// counters it can count from h and returns the violations.
func (h *history) check(cnt *counters) []string {
	var bad []string
	add := func(format string, args ...any) {
		if len(bad) < 20 {
			bad = append(bad, fmt.Sprintf(format, args...))
		}
	}
	puts := map[string]rec{} // by value (values are unique)
	var grants []rec
	for _, r := range h.recs {
		if r.Code == "internal" {
			add("P11: %s %s %s by %s failed with internal: %s", r.K, r.Op, r.Name, r.Proc, r.Msg)
		}
		switch r.K {
		case "put":
			puts[r.Value] = r
			if r.Code == "stale-token" {
				cnt.staleRejections++
			}
		case "grant":
			grants = append(grants, r)
		}
	}

	// A session that acquires a name it still holds (its release failed)
	// gets the same holding back: that grant was made when first asked for.
	first := map[string]int64{}
	for _, g := range grants {
		k := fmt.Sprintf("%s/%d", g.Lease, g.Token)
		if s, ok := first[k]; !ok || g.Sent < s {
			first[k] = g.Sent
		}
	}
	for i := range grants {
		grants[i].Sent = first[fmt.Sprintf("%s/%d", grants[i].Lease, grants[i].Token)]
	}
	// P2 in real time: a grant acknowledged before another was requested
	// has the smaller token.
	sort.Slice(grants, func(i, j int) bool { return grants[i].Ret < grants[j].Ret })
	byRet := grants
	for _, g := range grants {
		for _, e := range byRet {
			if e.Ret >= g.Sent {
				break
			}
			if e.Token > g.Token || (e.Token == g.Token && e.Lease != g.Lease) {
				add("P2: token %d (%s, %s) acknowledged before token %d (%s, %s) was requested", e.Token, e.Name, e.Proc, g.Token, g.Name, g.Proc)
			}
		}
	}

	// P2 in commit order and P6 on the stream: acquired tokens strictly
	// increase; a name is never acquired while another session holds it.
	// A resync replaces who holds what with its state.
	var lastTok uint64
	holder := map[string]string{}
	seen := map[uint64]bool{}
	resyncs := h.resyncs
	for i, ev := range h.events {
		for ; len(resyncs) > 0 && resyncs[0].at <= i; resyncs = resyncs[1:] {
			holder = resyncs[0].holders()
		}
		switch ev.GetType() {
		case pb.EventType_EVENT_TYPE_ACQUIRED:
			if ev.GetToken() <= lastTok {
				add("P2: token %d of %s committed after token %d (index %d)", ev.GetToken(), ev.GetName(), lastTok, ev.GetIndex())
			}
			lastTok = ev.GetToken()
			seen[ev.GetToken()] = true
			if l, ok := holder[ev.GetName()]; ok && l != ev.GetLeaseId() {
				add("P6: %s acquired by %s while held by %s (index %d)", ev.GetName(), ev.GetLeaseId(), l, ev.GetIndex())
			}
			holder[ev.GetName()] = ev.GetLeaseId()
		case pb.EventType_EVENT_TYPE_RELEASED:
			delete(holder, ev.GetName())
		case pb.EventType_EVENT_TYPE_EXPIRED:
			delete(holder, ev.GetName())
			cnt.expiries++
		}
	}
	// Every acknowledged grant was committed (the stream has no gap).
	if len(h.resyncs) == 0 {
		for _, g := range grants {
			if !seen[g.Token] {
				add("P5: acknowledged grant %s token %d (%s) is not in the committed stream", g.Name, g.Token, g.Proc)
			}
		}
	}

	// P4: the fence accepted no token below its high-water: an
	// acknowledged write follows every write acknowledged before it was
	// sent in token order.
	ackedByKey := map[string][]rec{}
	for _, p := range puts {
		if p.Code == "" {
			ackedByKey[p.Name] = append(ackedByKey[p.Name], p)
		}
	}
	for key, ps := range ackedByKey {
		sort.Slice(ps, func(i, j int) bool { return ps[i].Ret < ps[j].Ret })
		for _, b := range ps {
			for _, a := range ps {
				if a.Ret >= b.Sent {
					break
				}
				if a.Token > b.Token {
					add("P4: %s: write of token %d (%s) accepted after token %d was acknowledged", key, b.Token, b.Proc, a.Token)
				}
			}
		}
	}
	// P4 and P11 on what was read: a read sees no token below one
	// acknowledged before it was sent (no acknowledged write lost), and
	// never the value of a write that failed with a code other than
	// outcome-unknown (that code promised the write did not apply).
	observed := append(append([]rec(nil), h.reads...), finalRecs(h.final)...)
	for _, r := range observed {
		if p, ok := puts[r.Value]; ok && p.Code != "" && p.Code != "outcome-unknown" {
			add("P11: %s read %q@%d, written by a put that failed with %s (%s)", r.Name, r.Value, r.Token, p.Code, p.Msg)
		}
		for _, a := range ackedByKey[r.Name] {
			if (r.Sent == 0 || a.Ret < r.Sent) && a.Token > r.Token {
				add("P4: %s read token %d after the write of token %d (%s) was acknowledged", r.Name, r.Token, a.Token, a.Proc)
			}
		}
	}
	// Every acknowledged write survives: the final value carries the
	// largest acknowledged token, or a larger one.
	for key, ps := range ackedByKey {
		var best rec
		for _, p := range ps {
			if p.Token > best.Token {
				best = p
			}
		}
		f, ok := h.final[key]
		if !ok || f.Token < best.Token {
			add("P4: acknowledged write %s=%q@%d lost: the key ends at %q@%d", key, best.Value, best.Token, f.Value, f.Token)
		} else if p, known := puts[f.Value]; f.Token == best.Token && (!known || p.Token != f.Token) {
			add("P4: %s ends at %q@%d, which no write with that token wrote", key, f.Value, f.Token)
		}
	}
	return bad
}

func finalRecs(m map[string]rec) []rec {
	var out []rec
	for _, r := range m {
		out = append(out, r)
	}
	return out
}

// report logs the counters and fails the test for every violation and for
// every family of want that never fired.
func report(t *testing.T, h *history, cnt *counters, o *observer, want ...string) {
	t.Helper()
	for _, v := range h.check(cnt) {
		t.Error(v)
	}
	h.linearizable(t)
	cnt.leaderChanges = max(0, len(o.leaders)-1)
	ops := map[string]int{}
	codes := map[string]int{}
	for _, r := range h.recs {
		ops[r.K]++
		if r.Code != "" {
			codes[r.Code]++
		}
	}
	var fo []string
	for _, d := range cnt.failover {
		fo = append(fo, d.Round(time.Millisecond).String())
	}
	t.Logf("counters: leader changes %d, expiries %d, stale-token rejections %d, snapshot installs %d, early expiries %d, failpoints reached %d; failover %s",
		cnt.leaderChanges, cnt.expiries, cnt.staleRejections, cnt.snapshotInstalls, cnt.earlyExpiries, cnt.failpoints, strings.Join(fo, " "))
	t.Logf("checked: %d grants, %d puts, %d releases, %d reads, %d committed events (%d watch gaps); errors by code %v",
		ops["grant"], ops["put"], ops["release"], len(h.reads), len(h.events), len(h.resyncs), codes)
	fired := map[string]int{"leader-changes": cnt.leaderChanges, "expiries": cnt.expiries, "stale-token": cnt.staleRejections, "snapshot-installs": cnt.snapshotInstalls, "early-expiries": cnt.earlyExpiries}
	fired["failpoints"] = cnt.failpoints
	for _, w := range want {
		if fired[w] == 0 {
			t.Errorf("coverage: %s never fired: the schedule did not exercise what it is for", w)
		}
	}
	if ops["grant"] < 10 {
		t.Errorf("only %d grants acknowledged: the load did not run", ops["grant"])
	}
}

// resync is a state a watch resynced to, before events[at].
type resync struct {
	at    int
	state *client.Compacted
}

// holders maps each name the state shows held to its (first) holder's lease.
func (r resync) holders() map[string]string {
	m := map[string]string{}
	for _, l := range r.state.GetLocks() {
		if h := l.GetHolder(); h != nil {
			m[l.GetName()] = h.GetLeaseId()
		}
	}
	return m
}
