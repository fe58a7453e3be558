package metrics

import (
	"maps"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/fsm"
)

// TestEventCounters: every applied event is counted under its type, the
// counters looked up once per type included, and a type past the cached
// range too; a type never applied has no series.
func TestEventCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(Config{Registerer: reg, State: closedState{}})
	if err != nil {
		t.Fatal(err)
	}
	evs := func(types ...pb.EventType) *fsm.Result {
		res := &fsm.Result{}
		for _, ty := range types {
			res.Events = append(res.Events, fsm.Event{Type: ty})
		}
		return res
	}
	m.Observe(evs(pb.EventType_EVENT_TYPE_ACQUIRED, pb.EventType_EVENT_TYPE_QUEUED))
	m.Observe(evs(pb.EventType_EVENT_TYPE_RELEASED, pb.EventType_EVENT_TYPE_ACQUIRED))
	m.Observe(evs(pb.EventType_EVENT_TYPE_ACQUIRED, pb.EventType(99), pb.EventType(99)))
	m.Observe(evs(pb.EventType_EVENT_TYPE_LOCK_DELAY_ENDED, pb.EventType_EVENT_TYPE_PROCLAIMED))
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "leasehold_lock_events_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			got[s.GetLabel()[0].GetValue()] = s.GetCounter().GetValue()
		}
	}
	want := map[string]float64{"acquired": 3, "queued": 1, "released": 1, "99": 2, "lock_delay_ended": 1, "proclaimed": 1}
	if !maps.Equal(got, want) {
		t.Fatalf("leasehold_lock_events_total by type = %v, want %v (only the types applied)", got, want)
	}
}

// closedState is the State of a node that is not open: no applied state
// to read, no parked acquires.
type closedState struct{}

func (closedState) Read(func(m *fsm.Machine)) bool { return false }
func (closedState) Raft() Raft                     { return Raft{} }
func (closedState) Watchers() int                  { return 0 }
func (closedState) Parked() int                    { return 0 }
