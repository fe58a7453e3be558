package httpedge

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

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

// Prober is what the probes ask of the node. Its methods are called
// concurrently, from any request.
type Prober interface {
	// ID names this node.
	ID() string
	// LeaderID names the leader this node knows, "" when none.
	LeaderID() string
	// Readiness reports whether the node can serve. It may wait a moment
	// (for entries being applied) but never without bound.
	Readiness() Readiness
}

// healthChecker answers grpc.health.v1 for the whole node ("") and for each
// of its services: SERVING exactly when Readiness is ready.
type healthChecker struct{ p Prober }

func (h healthChecker) Check(_ context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	known := req.Service == ""
	for _, name := range services {
		known = known || req.Service == name
	}
	if !known {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("unknown service "+req.Service))
	}
	if h.p.Readiness().Ready {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
}

// MountProbes adds grpc.health.v1, server reflection (v1 and v1alpha),
// /healthz (liveness: the process answers) and /readyz (Readiness) to mux.
func MountProbes(mux *http.ServeMux, p Prober) {
	mux.Handle(grpchealth.NewHandler(healthChecker{p}))
	reflector := grpcreflect.NewStaticReflector(append([]string{grpchealth.HealthV1ServiceName}, services...)...)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "ok node=%s leader=%s\n", p.ID(), p.LeaderID())
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		rd := p.Readiness()
		if !rd.Ready {
			http.Error(w, fmt.Sprintf("not ready node=%s: %s", p.ID(), rd.Reason), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "ready node=%s leader=%s applied=%d commit=%d\n", p.ID(), rd.LeaderID, rd.AppliedIndex, rd.CommitIndex)
	})
}
