package grpcinterop_test

import (
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// TestGRPCGoClient: a stock grpc-go client with the default proto codec
// works, and a leasehold error arrives as a gRPC status whose details carry
// the leasehold code.
func TestGRPCGoClient(t *testing.T) {
	t.Parallel()
	c := servertest.Start(t, servertest.Options{})
	conn, err := grpc.NewClient(c.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const svc = "/leasehold.v1.LeaseholdService/"
	ctx := servertest.Ctx(t)

	var sess pb.CreateSessionResponse
	if err := conn.Invoke(ctx, svc+"CreateSession", &pb.CreateSessionRequest{TtlMs: 5000, Owner: "grpc-go"}, &sess); err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	if len(sess.GetLeaseId()) != 32 || sess.GetTtlMs() != 5000 || sess.GetOwner() != "grpc-go" {
		t.Fatalf("CreateSession response %v", &sess)
	}
	var acq pb.AcquireResponse
	if err := conn.Invoke(ctx, svc+"Acquire", &pb.AcquireRequest{Name: "g", LeaseId: sess.GetLeaseId()}, &acq); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	tok := acq.GetHolding().GetToken()
	if tok == 0 || acq.GetHolding().GetOwner() != "grpc-go" {
		t.Fatalf("Acquire response %v", &acq)
	}
	var put pb.KvPutResponse
	if err := conn.Invoke(ctx, svc+"KvPut", &pb.KvPutRequest{Key: "g", Value: []byte("v"), Token: tok}, &put); err != nil {
		t.Fatalf("KvPut: %v", err)
	}

	err = conn.Invoke(ctx, svc+"KvPut", &pb.KvPutRequest{Key: "g", Value: []byte("w"), Token: tok, Strict: true}, &put)
	st, ok := grpcstatus.FromError(err)
	if !ok || st.Code() != codes.Aborted {
		t.Fatalf("stale KvPut: %v, want gRPC status Aborted", err)
	}
	var detail *pb.ErrorDetail
	for _, d := range st.Details() {
		if e, ok := d.(*pb.ErrorDetail); ok {
			detail = e
		}
	}
	if detail.GetCode() != string(api.CodeStaleToken) || detail.GetLastToken() != tok {
		t.Fatalf("status details %v, want ErrorDetail{code: stale-token, last_token: %d}", st.Details(), tok)
	}

	err = conn.Invoke(ctx, svc+"CreateSession", &pb.CreateSessionRequest{TtlMs: -1}, &sess)
	if st, _ := grpcstatus.FromError(err); st.Code() != codes.InvalidArgument {
		t.Fatalf("CreateSession(ttl -1): %v, want InvalidArgument", err)
	}
}
