package server

import (
	"fmt"
	"time"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/internal/httpedge"
)

// readyCatchUp is how long a readiness check waits for the entries that
// were committed when it began to be applied. Under writes the commit
// index is always a little ahead of the applied index (an entry is
// committed, then handed to the state machine): that is not "behind". A
// node replaying a backlog (after a restart, or a follower catching up)
// does not close the gap in that time.
const readyCatchUp = 250 * time.Millisecond

// Readiness reports whether the node can serve: it knows a leader, and
// that leader's API address when it is another node (a follower forwards
// writes there), and has applied, within readyCatchUp, every entry it knew
// to be committed when asked.
func (s *Server) Readiness() httpedge.Readiness {
	r := s.node.Raft()
	id, _ := s.node.Leader()
	rd := httpedge.Readiness{LeaderID: id, CommitIndex: r.CommitIndex(), AppliedIndex: r.AppliedIndex()}
	for deadline := time.Now().Add(readyCatchUp); id != "" && rd.AppliedIndex < rd.CommitIndex && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
		rd.AppliedIndex = r.AppliedIndex()
	}
	var unknown *api.Error
	if id != "" && id != s.node.ID() {
		if _, err := s.leaderAPIAddr(); err != nil {
			unknown = api.FromError(err)
		}
	}
	switch {
	case id == "":
		rd.Reason = "no leader"
	case unknown != nil:
		rd.Reason = unknown.Message
	case rd.AppliedIndex < rd.CommitIndex:
		rd.Reason = fmt.Sprintf("applied index %d behind commit index %d for %v", rd.AppliedIndex, rd.CommitIndex, readyCatchUp)
	default:
		rd.Ready = true
	}
	return rd
}

// prober adapts the server to httpedge.Prober (/healthz, /readyz,
// grpc.health.v1).
type prober struct{ s *Server }

func (p prober) ID() string                    { return p.s.node.ID() }
func (p prober) LeaderID() string              { id, _ := p.s.node.Leader(); return id }
func (p prober) Readiness() httpedge.Readiness { return p.s.Readiness() }
