//go:build leasehold_faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// counters is a schedule's coverage: what its faults made happen.
type counters struct {
	leaderChanges, expiries, staleRejections, snapshotInstalls, earlyExpiries int
	failover                                                                  []time.Duration
	failpoints                                                                int // crash failpoints reached
}

// observer watches the cluster from the test's namespace while a schedule
// runs: the lock events in commit order (P2, P6 on the stream), linearizable
// reads of the KV keys (P4, P11) and who leads (coverage).
type observer struct {
	mu         sync.Mutex // protects following
	events     []*pb.Event
	resyncs    []resync // states the watch resynced to, where it could not continue without a gap
	reads      []rec
	statuses   []rec    // linearizable status reads of the keys as lock names
	leaders    []string // every change of the leader a node named, as ID@term
	violations []string

	stop func()
	wg   sync.WaitGroup
}

func observe(eps string, prefix string, keys []string) *observer {
	ctx, cancel := context.WithCancel(context.Background())
	o := &observer{stop: cancel}
	o.wg.Go(func() { o.watch(ctx, eps, prefix) })
	o.wg.Go(func() { o.read(ctx, eps, keys) })
	o.wg.Go(func() { o.pollLeader(ctx, eps) })
	return o
}

// close stops the observer and waits for its goroutines.
func (o *observer) close() {
	o.stop()
	o.wg.Wait()
}

// lastToken is the token of the last acquisition the watch saw.
func (o *observer) lastToken() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := len(o.events) - 1; i >= 0; i-- {
		if o.events[i].GetType() == pb.EventType_EVENT_TYPE_ACQUIRED {
			return o.events[i].GetToken()
		}
	}
	return 0
}

func (o *observer) watch(ctx context.Context, eps, prefix string) {
	c, err := client.Dial(ctx, eps, client.WithRetryTimeout(time.Minute))
	if err != nil {
		return
	}
	defer c.Close()
	var last uint64
	onCompacted := client.OnCompacted(func(st *client.Compacted) {
		last = st.GetIndex()
		o.mu.Lock()
		o.resyncs = append(o.resyncs, resync{at: len(o.events), state: st})
		o.mu.Unlock()
	})
	for ctx.Err() == nil {
		opts := []client.WatchOption{onCompacted}
		if last > 0 {
			opts = append(opts, client.FromIndex(last+1))
		}
		events, err := c.Watch(ctx, prefix, opts...)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		for ev, err := range events {
			if err != nil {
				break
			}
			last = ev.GetIndex()
			o.mu.Lock()
			o.events = append(o.events, ev)
			o.mu.Unlock()
		}
	}
}

func (o *observer) read(ctx context.Context, eps string, keys []string) {
	c, err := client.Dial(ctx, eps)
	if err != nil {
		return
	}
	defer c.Close()
	for i := 0; ctx.Err() == nil; i++ {
		key := keys[i%len(keys)]
		o.status(ctx, c, key)
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		sent := time.Now()
		v, tok, err := c.KVGet(rctx, key)
		cancel()
		switch {
		case err == nil:
			o.mu.Lock()
			o.reads = append(o.reads, rec{K: "read", Proc: "observer", Name: key, Token: tok, Value: string(v), Sent: sent.UnixNano(), Ret: time.Now().UnixNano()})
			o.mu.Unlock()
		case errors.Is(err, client.ErrNotFound):
		default:
			if codeOf(err) == "internal" {
				o.mu.Lock()
				o.violations = append(o.violations, "P11: a read failed with internal: "+err.Error())
				o.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

func (o *observer) pollLeader(ctx context.Context, eps string) {
	c, err := client.Dial(ctx, eps)
	if err != nil {
		return
	}
	defer c.Close()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		_, id, err := c.Members(qctx)
		if err == nil && id != "" {
			// A leader killed and elected again leads in a new term: a
			// change of leader as much as another node's election.
			var term float64
			for _, ep := range strings.Split(eps, ",") {
				if v, err := servertest.ReadMetric(qctx, ep, "leasehold_raft_term"); err == nil {
					term = max(term, v)
				}
			}
			lead := fmt.Sprintf("%s@%.0f", id, term)
			o.mu.Lock()
			if n := len(o.leaders); n == 0 || o.leaders[n-1] != lead {
				o.leaders = append(o.leaders, lead)
			}
			o.mu.Unlock()
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
