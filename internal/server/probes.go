package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
)

// services are the RPC services a node serves, by full name: what the
// health checker answers for and what server reflection lists.
var services = []string{
	leaseholdv1connect.LeaseholdServiceName,
	leaseholdv1connect.ClusterServiceName,
}

// Readiness is what /readyz and grpc.health.v1 report.
type Readiness struct {
	Ready        bool
	Reason       string // why not ready; empty when ready
	LeaderID     string
	CommitIndex  uint64
	AppliedIndex uint64
}

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
func (s *Server) Readiness() Readiness {
	r := s.node.Raft()
	id, _ := s.node.Leader()
	rd := Readiness{LeaderID: id, CommitIndex: r.CommitIndex(), AppliedIndex: r.AppliedIndex()}
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

// healthChecker answers grpc.health.v1 for the whole node ("") and for each
// of its services: SERVING exactly when Readiness is ready.
type healthChecker struct{ s *Server }

func (h healthChecker) Check(_ context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	known := req.Service == ""
	for _, name := range services {
		known = known || req.Service == name
	}
	if !known {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("unknown service "+req.Service))
	}
	if h.s.Readiness().Ready {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
}

// mountProbes adds grpc.health.v1, server reflection (v1 and v1alpha),
// /healthz (liveness: the process answers) and /readyz (Readiness).
func (s *Server) mountProbes(mux *http.ServeMux) {
	mux.Handle(grpchealth.NewHandler(healthChecker{s}))
	reflector := grpcreflect.NewStaticReflector(append([]string{grpchealth.HealthV1ServiceName}, services...)...)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		id, _ := s.node.Leader()
		fmt.Fprintf(w, "ok node=%s leader=%s\n", s.node.ID(), id)
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		rd := s.Readiness()
		if !rd.Ready {
			http.Error(w, fmt.Sprintf("not ready node=%s: %s", s.node.ID(), rd.Reason), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "ready node=%s leader=%s applied=%d commit=%d\n", s.node.ID(), rd.LeaderID, rd.AppliedIndex, rd.CommitIndex)
	})
}
