package httpedge_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
)

// The endpoints and middlewares of this package are tested on a real
// server (internal/harness/servertest), as clients reach them.

type client = leaseholdv1connect.LeaseholdServiceClient

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func req[T any](m *T) *connect.Request[T] { return connect.NewRequest(m) }

func mustOK(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func newSession(t *testing.T, c client, ttlMs int64, owner string) *pb.CreateSessionResponse {
	t.Helper()
	resp, err := c.CreateSession(ctxT(t), req(&pb.CreateSessionRequest{TtlMs: ttlMs, Owner: owner}))
	mustOK(t, "CreateSession", err)
	return resp.Msg
}

func acquire(t *testing.T, c client, name, lease string) *pb.Holding {
	t.Helper()
	resp, err := c.Acquire(ctxT(t), req(&pb.AcquireRequest{Name: name, LeaseId: lease}))
	mustOK(t, "Acquire "+name, err)
	return resp.Msg.GetHolding()
}
