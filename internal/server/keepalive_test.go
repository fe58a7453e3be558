package server_test

import (
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/harness/servertest"
	"github.com/leasehold/leasehold/internal/server"
)

// TestKeepAliveBatch: one KeepAlive or KeepAliveStream message renews many
// sessions and answers each id in order; an unknown or malformed id is
// refused alone; a batch above MaxKeepAliveBatch, or lease_id together with
// lease_ids, is refused whole.
func TestKeepAliveBatch(t *testing.T) {
	t.Parallel()
	c, clk := startManual(t, servertest.Options{})
	cl := c.Client
	a := newSession(t, cl, 1000, "a").GetLeaseId()
	b := newSession(t, cl, 1000, "b").GetLeaseId()
	acquire(t, cl, "batch:a", a)
	acquire(t, cl, "batch:b", b)
	unknown := servertest.UnknownLeaseID()
	ids := []string{a, unknown, "not-a-lease", b}
	want := []struct {
		ttl  int64
		code api.Code
	}{{1000, ""}, {0, api.CodeLeaseExpired}, {0, api.CodeInvalidArgument}, {1000, ""}}
	check := func(what string, results []*pb.KeepAliveResult) {
		t.Helper()
		if len(results) != len(ids) {
			t.Fatalf("%s: %d results for %d ids", what, len(results), len(ids))
		}
		for i, r := range results {
			if r.GetLeaseId() != ids[i] || r.GetTtlMs() != want[i].ttl || api.Code(r.GetErrorCode()) != want[i].code {
				t.Fatalf("%s: result %d = %v, want lease %s ttl %d code %q", what, i, r, ids[i], want[i].ttl, want[i].code)
			}
		}
	}
	stream := cl.KeepAliveStream(ctxT(t))
	for range 6 { // 3 s: three TTLs, renewed alternately by unary and stream batches
		clk.Advance(250 * time.Millisecond)
		res, err := cl.KeepAlive(ctxT(t), req(&pb.KeepAliveRequest{LeaseIds: ids}))
		mustOK(t, "KeepAlive batch", err)
		check("KeepAlive", res.Msg.GetResults())
		clk.Advance(250 * time.Millisecond)
		mustOK(t, "stream send", stream.Send(&pb.KeepAliveStreamRequest{LeaseIds: ids}))
		r, err := stream.Receive()
		mustOK(t, "stream receive", err)
		check("KeepAliveStream", r.GetResults())
	}
	for _, name := range []string{"batch:a", "batch:b"} {
		if info := status(t, cl, name); info.GetHolder() == nil {
			t.Fatalf("%s lost after 3 s of batched keepalives: %v", name, info)
		}
	}

	tooMany := slices.Repeat([]string{a}, server.MaxKeepAliveBatch+1)
	_, err := cl.KeepAlive(ctxT(t), req(&pb.KeepAliveRequest{LeaseIds: tooMany}))
	wantCode(t, "KeepAlive above the batch limit", err, api.CodeInvalidArgument)
	_, err = cl.KeepAlive(ctxT(t), req(&pb.KeepAliveRequest{LeaseId: a, LeaseIds: []string{b}}))
	wantCode(t, "KeepAlive with lease_id and lease_ids", err, api.CodeInvalidArgument)
	mustOK(t, "stream send", stream.Send(&pb.KeepAliveStreamRequest{LeaseIds: tooMany}))
	r, err := stream.Receive()
	mustOK(t, "stream receive", err)
	if api.Code(r.GetErrorCode()) != api.CodeInvalidArgument || len(r.GetResults()) != 0 {
		t.Fatalf("stream batch above the limit: %v, want error code invalid-argument", r.GetErrorCode())
	}
	mustOK(t, "close send", stream.CloseRequest())
	mustOK(t, "close receive", stream.CloseResponse())
}
