package servertest

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
)

// The calls most tests of a server begin with, each failing the test on an
// error.

// Ctx is a context for one call of a test: it ends after 15 s or with the
// test.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// NewSession creates a session of ttlMs with an owner label.
func NewSession(t testing.TB, c leaseholdv1connect.LeaseholdServiceClient, ttlMs int64, owner string) *pb.CreateSessionResponse {
	t.Helper()
	resp, err := c.CreateSession(Ctx(t), connect.NewRequest(&pb.CreateSessionRequest{TtlMs: ttlMs, Owner: owner}))
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	return resp.Msg
}

// Acquire takes name in the session lease, waiting for it.
func Acquire(t testing.TB, c leaseholdv1connect.LeaseholdServiceClient, name, lease string) *pb.Holding {
	t.Helper()
	resp, err := c.Acquire(Ctx(t), connect.NewRequest(&pb.AcquireRequest{Name: name, LeaseId: lease}))
	if err != nil {
		t.Fatalf("Acquire %s: %v", name, err)
	}
	return resp.Msg.GetHolding()
}

// HTTPGet GETs url with c and returns the status and the body.
func HTTPGet(t testing.TB, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
