package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold/internal/fsm"
)

// State is what the gauges read from the node at scrape time. The server
// implements it over its raft node, its hub, its dashboard feed and its
// limits. Its methods are called on the scraping goroutine, concurrently
// with everything else, and must not wait on Raft or the network.
type State interface {
	// Read calls f with the applied state under the state's read lock and
	// reports true; before the node is open it calls nothing and reports
	// false, and the gauges of the state and of Raft export nothing.
	Read(f func(m *fsm.Machine)) bool
	// Raft is this node's Raft progress. Called only after Read reported
	// true.
	Raft() Raft
	// Watchers is the number of Watch streams and dashboard event feeds
	// open on this node.
	Watchers() int
	// Parked is the number of blocking Acquires parked on this node (0
	// while its limits are not set up).
	Parked() int
}

// Raft is a node's Raft progress, as the gauges export it.
type Raft struct {
	Term, CommitIndex, AppliedIndex uint64
	// LastContactSeconds is 0 on the leader, the time since the leader was
	// last heard from on a follower, and -1 when it never was.
	LastContactSeconds float64
}

// stateCollector reads the applied state and raft's counters at scrape time.
type stateCollector struct{ st State }

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
	var census fsm.Census
	var token uint64
	if !c.st.Read(func(m *fsm.Machine) { census, token = m.Census(), m.Token() }) {
		return // the node is not open yet
	}
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	gauge(descSessions, float64(census.Sessions))
	gauge(descHeld, float64(census.Held))
	gauge(descWaiters, float64(census.Waiters))
	gauge(descDelayed, float64(census.Delayed))
	gauge(descWatchers, float64(c.st.Watchers()))
	gauge(descTokenCounter, float64(token))
	r := c.st.Raft()
	gauge(descTerm, float64(r.Term))
	gauge(descCommit, float64(r.CommitIndex))
	gauge(descApplied, float64(r.AppliedIndex))
	gauge(descLastContact, r.LastContactSeconds)
}

// RegisterStateGauges registers on Config.Registerer the gauges of the
// state's accounted size and its quota, read under the state's read lock
// at scrape time only. Call it once the node is open: they read the state
// whenever scraped.
func (m *Metrics) RegisterStateGauges() error {
	read := func(f func(m *fsm.Machine) int64) func() float64 {
		return func() float64 {
			var v int64
			m.state.Read(func(m *fsm.Machine) { v = f(m) })
			return float64(v)
		}
	}
	for _, g := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "leasehold_state_bytes", Help: "Accounted size of the replicated state (see the state quota)."},
			read(func(m *fsm.Machine) int64 { return m.Bytes() })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "leasehold_state_quota_bytes", Help: "The state quota (serve --quota-bytes); 0 means none."},
			read(func(m *fsm.Machine) int64 { return m.Limits().MaxStateBytes })),
	} {
		if err := m.reg.Register(g); err != nil {
			return err
		}
	}
	return nil
}
