package fsm

import (
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// checkpoint applies a Checkpoint: it records the remaining time of
// sessions the leader saw go unrenewed and clears the record of sessions
// renewed since. The lessor reads the record on promotion (see package
// lessor). A checkpoint whose generation is below the session's last clear
// was computed before that renewal and is ignored; unknown sessions are
// skipped. The session's message is replaced, never changed in place,
// because earlier Results may still point to it.
func (m *Machine) checkpoint(c *fsmpb.Checkpoint) {
	for _, cp := range c.GetSessions() {
		s, ok := m.sessions[cp.GetLeaseId()]
		if !ok {
			continue
		}
		gen := s.pb.GetCheckpointGeneration()
		switch {
		case cp.GetCleared():
			if !s.pb.GetCheckpointed() && cp.GetGeneration() <= gen {
				continue
			}
			pb := proto.CloneOf(s.pb)
			pb.Checkpointed, pb.CheckpointRemainingMs = false, 0
			pb.CheckpointGeneration = max(gen, cp.GetGeneration())
			s.pb = pb
		case cp.GetGeneration() >= gen:
			pb := proto.CloneOf(s.pb)
			pb.Checkpointed, pb.CheckpointRemainingMs = true, max(0, cp.GetRemainingMs())
			pb.CheckpointGeneration = cp.GetGeneration()
			s.pb = pb
		}
	}
}
