package server

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/buildinfo"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/httpedge"
)

// metrics are the server's Prometheus metrics, registered on the
// Registerer from Config (never globally). docs/operating/monitoring.md and
// deploy/grafana/leasehold.json use these names.
type metrics struct {
	rpcs             *prometheus.CounterVec
	rpcSeconds       *prometheus.HistogramVec
	events           *prometheus.CounterVec
	eventCounters    [32]atomic.Pointer[prometheus.Counter] // events by type, as each first occurs
	kvWrites         *prometheus.CounterVec
	applySeconds     prometheus.Histogram
	forwarded        prometheus.Counter
	leader           prometheus.Gauge
	keepaliveStreams prometheus.Gauge
	keepaliveMsgs    prometheus.Counter
	logAppendSeconds prometheus.Histogram
	logAppendEntries prometheus.Histogram
	fsmApplySeconds  prometheus.Histogram
	acquiresQueued   prometheus.GaugeFunc
}

// latencyBuckets span 0.1 ms to about 3.3 s.
var latencyBuckets = prometheus.ExponentialBuckets(0.0001, 2, 16)

func newMetrics(reg prometheus.Registerer, s *Server) (*metrics, error) {
	m := &metrics{
		rpcs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_rpc_total", Help: "RPCs served, by method and leasehold code (ok on success).",
		}, []string{"method", "code"}),
		rpcSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "leasehold_rpc_duration_seconds", Help: "Time to answer a unary RPC, by method (a queued Acquire includes its wait).",
			Buckets: latencyBuckets,
		}, []string{"method"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_lock_events_total", Help: "Lock events applied by this node, by type (acquired, released, expired, ...).",
		}, []string{"type"}),
		kvWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_kv_writes_total", Help: "Fenced KV writes applied by this node, by result (accepted, stale-token, invalid-token, too-many-keys).",
		}, []string{"result"}),
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "leasehold_apply_seconds", Help: "Time from proposing a command to its apply on the leader.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_forwarded_total", Help: "Requests this follower forwarded to the leader.",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leasehold_is_leader", Help: "1 while this node is the Raft leader.",
		}),
		keepaliveStreams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leasehold_keepalive_streams", Help: "KeepAliveStream streams open on this node.",
		}),
		keepaliveMsgs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_keepalive_messages_total", Help: "KeepAliveStream requests this node answered (each renews one session or a batch).",
		}),
		logAppendSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "leasehold_raft_log_append_seconds", Help: "Time to append a batch of entries to the Raft log store, fsync included.",
			Buckets: latencyBuckets,
		}),
		logAppendEntries: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "leasehold_raft_log_append_entries", Help: "Entries per Raft log append (commands sharing one fsync).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}),
		fsmApplySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "leasehold_fsm_apply_seconds", Help: "Time the state machine took to apply one committed entry.",
			Buckets: prometheus.ExponentialBuckets(0.000001, 4, 12),
		}),
		acquiresQueued: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leasehold_acquires_queued", Help: "Blocking Acquires parked on this node: queued for a lock, or proposed and not yet applied (serve --limit queued-per-session, queued-per-principal).",
		}, func() float64 {
			if s.lim == nil { // before Open set it up
				return 0
			}
			return float64(s.lim.Parked())
		}),
	}
	info := buildinfo.Get()
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "leasehold_build_info", Help: "Always 1; the labels name the running build.",
		ConstLabels: prometheus.Labels{"version": info.Version, "commit": info.Commit, "goversion": info.GoVersion},
	})
	build.Set(1)
	for _, c := range []prometheus.Collector{
		m.rpcs, m.rpcSeconds, m.events, m.kvWrites, m.applySeconds, m.forwarded, m.leader, m.keepaliveStreams, m.keepaliveMsgs,
		m.logAppendSeconds, m.logAppendEntries, m.fsmApplySeconds, m.acquiresQueued, build, stateCollector{s},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			return nil, errors.Join(errors.New("server: register metrics"), err)
		}
	}
	return m, nil
}

// LogAppend and FSMApply implement raftnode.Metrics.
func (m *metrics) LogAppend(d time.Duration, n int) {
	m.logAppendSeconds.Observe(d.Seconds())
	m.logAppendEntries.Observe(float64(n))
}

func (m *metrics) FSMApply(d time.Duration) { m.fsmApplySeconds.Observe(d.Seconds()) }

func (m *metrics) observe(res *fsm.Result) {
	for _, ev := range res.Events {
		m.eventCounter(ev.Type).Inc()
	}
	if w, ok := kvWriteOf(res); ok {
		m.kvWrites.WithLabelValues(w.Result).Inc()
	}
}

// eventCounter is events' counter for type t, looked up once per type:
// every applied command counts its events, on the FSM goroutine.
func (m *metrics) eventCounter(t pb.EventType) prometheus.Counter {
	slot := int(t)
	if slot < 0 || slot >= len(m.eventCounters) {
		return m.events.WithLabelValues(eventLabel(t))
	}
	if c := m.eventCounters[slot].Load(); c != nil {
		return *c
	}
	c := m.events.WithLabelValues(eventLabel(t))
	m.eventCounters[slot].Store(&c)
	return c
}

// eventLabels are the event types as metrics and the dashboard name them
// ("acquired", "lock_delay_ended"), spelled once rather than per event.
var eventLabels = func() (l [32]string) {
	for v := range pb.EventType_name {
		if v >= 0 && int(v) < len(l) {
			l[v] = spellEvent(pb.EventType(v))
		}
	}
	return l
}()

func eventLabel(t pb.EventType) string {
	if t >= 0 && int(t) < len(eventLabels) && eventLabels[t] != "" {
		return eventLabels[t]
	}
	return spellEvent(t)
}

func spellEvent(t pb.EventType) string {
	return strings.ToLower(strings.TrimPrefix(t.String(), "EVENT_TYPE_"))
}

func methodOf(procedure string) string { return procedure[strings.LastIndexByte(procedure, '/')+1:] }

func (m *metrics) count(ctx context.Context, procedure string, err error) {
	code := "ok"
	if err != nil {
		code = string(api.CodeOf(err))
	}
	m.rpcs.WithLabelValues(methodOf(procedure), code).Inc()
	httpedge.NoteCode(ctx, code)
}

// interceptor counts RPCs by method and code, times unary RPCs, counts
// open keepalive streams and gives the access log the code.
func (m *metrics) interceptor() connect.Interceptor { return rpcCounter{m} }

type rpcCounter struct{ m *metrics }

func (c rpcCounter) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		start := time.Now()
		res, err := next(ctx, req)
		c.m.observeOp(ctx, req.Spec().Procedure, start, err)
		return res, err
	}
}

// observeOp times and counts one operation that started at start: a unary
// RPC, or one message of a LockStream as the unary procedure proc.
func (m *metrics) observeOp(ctx context.Context, proc string, start time.Time, err error) {
	m.rpcSeconds.WithLabelValues(methodOf(proc)).Observe(time.Since(start).Seconds())
	m.count(ctx, proc, err)
}

func (c rpcCounter) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (c rpcCounter) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if methodOf(conn.Spec().Procedure) == "KeepAliveStream" {
			c.m.keepaliveStreams.Inc()
			defer c.m.keepaliveStreams.Dec()
		}
		err := next(ctx, conn)
		c.m.count(ctx, conn.Spec().Procedure, err)
		return err
	}
}

// stateCollector reads the applied state and raft's counters at scrape time.
type stateCollector struct{ s *Server }

var (
	descSessions     = prometheus.NewDesc("leasehold_sessions", "Live sessions in this node's applied state.", nil, nil)
	descHeld         = prometheus.NewDesc("leasehold_locks_held", "Lock names held, in this node's applied state.", nil, nil)
	descWaiters      = prometheus.NewDesc("leasehold_waiters", "Sessions queued for a lock, in this node's applied state.", nil, nil)
	descDelayed      = prometheus.NewDesc("leasehold_locks_in_lock_delay", "Lock names in lock-delay, in this node's applied state.", nil, nil)
	descWatchers     = prometheus.NewDesc("leasehold_watchers", "Watch streams (and dashboard event feeds) open on this node.", nil, nil)
	descTerm         = prometheus.NewDesc("leasehold_raft_term", "This node's current Raft term.", nil, nil)
	descCommit       = prometheus.NewDesc("leasehold_raft_commit_index", "The highest log index this node knows to be committed.", nil, nil)
	descApplied      = prometheus.NewDesc("leasehold_raft_applied_index", "The highest log index this node has applied.", nil, nil)
	descLastContact  = prometheus.NewDesc("leasehold_raft_last_contact_seconds", "Seconds since this follower last heard from the leader (0 on the leader; -1 never).", nil, nil)
	descTokenCounter = prometheus.NewDesc("leasehold_token", "The newest fencing token issued, in this node's applied state.", nil, nil)
)

func (stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSessions, descHeld, descWaiters, descDelayed, descWatchers, descTerm, descCommit, descApplied, descLastContact, descTokenCounter} {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	if s.node == nil {
		return // Open has not finished
	}
	var census fsm.Census
	var token uint64
	s.node.Read(func(m *fsm.Machine) { census, token = m.Census(), m.Token() })
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	gauge(descSessions, float64(census.Sessions))
	gauge(descHeld, float64(census.Held))
	gauge(descWaiters, float64(census.Waiters))
	gauge(descDelayed, float64(census.Delayed))
	gauge(descWatchers, float64(s.hub.Watchers()+s.feed.Subscribers()))
	gauge(descTokenCounter, float64(token))
	r := s.node.Raft()
	term, _ := strconv.ParseUint(r.Stats()["term"], 10, 64)
	gauge(descTerm, float64(term))
	gauge(descCommit, float64(r.CommitIndex()))
	gauge(descApplied, float64(r.AppliedIndex()))
	gauge(descLastContact, lastContactSeconds(s))
}

// lastContactSeconds is 0 on the leader, the time since the leader was
// last heard from on a follower, and -1 when it never was.
func lastContactSeconds(s *Server) float64 {
	if s.node.IsLeader() {
		return 0
	}
	lc := s.node.Raft().LastContact()
	if lc.IsZero() {
		return -1
	}
	return time.Since(lc).Seconds()
}
