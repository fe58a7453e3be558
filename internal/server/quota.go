package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold/internal/fsm"
)

// registerStateGauges exports the state's accounted size and its quota,
// read under the state's read lock at scrape time only.
func (s *Server) registerStateGauges(reg prometheus.Registerer) error {
	read := func(f func(m *fsm.Machine) int64) func() float64 {
		return func() float64 {
			var v int64
			s.node.Read(func(m *fsm.Machine) { v = f(m) })
			return float64(v)
		}
	}
	for _, g := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "leasehold_state_bytes", Help: "Accounted size of the replicated state (see the state quota)."},
			read(func(m *fsm.Machine) int64 { return m.Bytes() })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "leasehold_state_quota_bytes", Help: "The state quota (serve --quota-bytes); 0 means none."},
			read(func(m *fsm.Machine) int64 { return m.Limits().MaxStateBytes })),
	} {
		if err := reg.Register(g); err != nil {
			return err
		}
	}
	return nil
}
