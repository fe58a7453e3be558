package server

import (
	"strconv"
	"time"

	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/metrics"
)

// metricsState is what the gauges of internal/metrics read at scrape time
// (metrics.State): the applied state, Raft's progress, the open watchers
// and the parked acquires.
type metricsState struct{ s *Server }

func (m metricsState) Read(f func(m *fsm.Machine)) bool {
	if m.s.node == nil {
		return false // Open has not finished
	}
	m.s.node.Read(f)
	return true
}

func (m metricsState) Raft() metrics.Raft {
	r := m.s.node.Raft()
	term, _ := strconv.ParseUint(r.Stats()["term"], 10, 64)
	return metrics.Raft{Term: term, CommitIndex: r.CommitIndex(), AppliedIndex: r.AppliedIndex(), LastContactSeconds: lastContactSeconds(m.s)}
}

func (m metricsState) Watchers() int { return m.s.hub.Watchers() + m.s.feed.Subscribers() }

func (m metricsState) Parked() int {
	if m.s.lim == nil { // before Open set it up
		return 0
	}
	return m.s.lim.Parked()
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
