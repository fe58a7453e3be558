package httpedge_test

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// The endpoints and middlewares of this package are tested on a real
// server (internal/harness/servertest), as clients reach them.

type client = leaseholdv1connect.LeaseholdServiceClient

func ctxT(t *testing.T) context.Context { return servertest.Ctx(t) }

func req[T any](m *T) *connect.Request[T] { return connect.NewRequest(m) }

func mustOK(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func newSession(t *testing.T, c client, ttlMs int64, owner string) *pb.CreateSessionResponse {
	t.Helper()
	return servertest.NewSession(t, c, ttlMs, owner)
}

func acquire(t *testing.T, c client, name, lease string) *pb.Holding {
	t.Helper()
	return servertest.Acquire(t, c, name, lease)
}

func httpGet(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	return servertest.HTTPGet(t, c, url)
}
