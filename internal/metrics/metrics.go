package metrics

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/buildinfo"
	"github.com/leasehold/leasehold/internal/fsm"
)

// Config configures a node's Metrics.
type Config struct {
	// Registerer receives every metric. Required: nothing is registered
	// globally.
	Registerer prometheus.Registerer
	// State is what the gauges read at scrape time. Required.
	State State
	// NoteCode, when set, is told the leasehold code ("ok" on success) of
	// every RPC the interceptor counts, on the RPC's goroutine.
	NoteCode func(ctx context.Context, code string)
}

// Validate reports a Config that New cannot use.
func (c Config) Validate() error {
	switch {
	case c.Registerer == nil:
		return errors.New("metrics: Config.Registerer is nil")
	case c.State == nil:
		return errors.New("metrics: Config.State is nil")
	}
	return nil
}

// Metrics are a node's Prometheus metrics. Every method is safe for
// concurrent use and returns without blocking.
type Metrics struct {
	reg      prometheus.Registerer
	state    State
	noteCode func(ctx context.Context, code string)

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

// New defines the metrics and registers them on cfg.Registerer, with the
// gauges of the applied state and Raft (read through cfg.State), the
// build, the Go runtime and the process. The gauges of the state's size
// are registered apart, by RegisterStateGauges. An error is cfg's or the
// Registerer's (a name registered twice).
func New(cfg Config) (*Metrics, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	st := cfg.State
	m := &Metrics{
		reg:      cfg.Registerer,
		state:    st,
		noteCode: cfg.NoteCode,
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
		}, func() float64 { return float64(st.Parked()) }),
	}
	info := buildinfo.Get()
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "leasehold_build_info", Help: "Always 1; the labels name the running build.",
		ConstLabels: prometheus.Labels{"version": info.Version, "commit": info.Commit, "goversion": info.GoVersion},
	})
	build.Set(1)
	for _, c := range []prometheus.Collector{
		m.rpcs, m.rpcSeconds, m.events, m.kvWrites, m.applySeconds, m.forwarded, m.leader, m.keepaliveStreams, m.keepaliveMsgs,
		m.logAppendSeconds, m.logAppendEntries, m.fsmApplySeconds, m.acquiresQueued, build, stateCollector{st},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := m.reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// LogAppend and FSMApply implement raftnode.Metrics.
func (m *Metrics) LogAppend(d time.Duration, n int) {
	m.logAppendSeconds.Observe(d.Seconds())
	m.logAppendEntries.Observe(float64(n))
}

func (m *Metrics) FSMApply(d time.Duration) { m.fsmApplySeconds.Observe(d.Seconds()) }

// Observe counts the events and the fenced KV write of one applied entry.
// It runs on the apply goroutine of every node.
func (m *Metrics) Observe(res *fsm.Result) {
	for _, ev := range res.Events {
		m.eventCounter(ev.Type).Inc()
	}
	if w, ok := KVWriteOf(res); ok {
		m.kvWrites.WithLabelValues(w.Result).Inc()
	}
}

// ObserveApply records the time d from proposing a command to its apply.
func (m *Metrics) ObserveApply(d time.Duration) { m.applySeconds.Observe(d.Seconds()) }

// CountForward counts one request this follower forwarded to the leader.
func (m *Metrics) CountForward() { m.forwarded.Inc() }

// CountKeepaliveMessage counts one KeepAliveStream request answered.
func (m *Metrics) CountKeepaliveMessage() { m.keepaliveMsgs.Inc() }

// SetLeader sets leasehold_is_leader to 1 while leader is true, else 0.
func (m *Metrics) SetLeader(leader bool) {
	v := 0.0
	if leader {
		v = 1
	}
	m.leader.Set(v)
}

// eventCounter is events' counter for type t, looked up once per type:
// every applied command counts its events, on the FSM goroutine.
func (m *Metrics) eventCounter(t pb.EventType) prometheus.Counter {
	slot := int(t)
	if slot < 0 || slot >= len(m.eventCounters) {
		return m.events.WithLabelValues(EventLabel(t))
	}
	if c := m.eventCounters[slot].Load(); c != nil {
		return *c
	}
	c := m.events.WithLabelValues(EventLabel(t))
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

// EventLabel names event type t as the metrics and the dashboard do: the
// enum name without its prefix, in lower case ("acquired",
// "lock_delay_ended"); a type the API does not know is its number.
func EventLabel(t pb.EventType) string {
	if t >= 0 && int(t) < len(eventLabels) && eventLabels[t] != "" {
		return eventLabels[t]
	}
	return spellEvent(t)
}

func spellEvent(t pb.EventType) string {
	return strings.ToLower(strings.TrimPrefix(t.String(), "EVENT_TYPE_"))
}
