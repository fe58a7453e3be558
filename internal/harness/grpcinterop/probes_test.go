//lint:file-ignore SA1019 reflection v1alpha is deprecated but older grpcurl versions still use it, so it is tested.

package grpcinterop_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// TestHealthServing: a stock grpc-go health client sees SERVING for the
// node and for each service, NOT_FOUND for an unknown one, and /readyz and
// /healthz answer 200.
func TestHealthServing(t *testing.T) {
	t.Parallel()
	c := servertest.Start(t, servertest.Options{})
	hc := healthpb.NewHealthClient(grpcConn(t, c.Addr))
	for _, svc := range []string{"", "leasehold.v1.LeaseholdService", "leasehold.v1.ClusterService"} {
		resp, err := hc.Check(servertest.Ctx(t), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("Check(%q): %v", svc, err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Check(%q) = %v, want SERVING", svc, resp.GetStatus())
		}
	}
	_, err := hc.Check(servertest.Ctx(t), &healthpb.HealthCheckRequest{Service: "no.such.Service"})
	if grpcstatus.Code(err) != codes.NotFound {
		t.Fatalf("Check(unknown) = %v, want NotFound", err)
	}
	if code, body := servertest.HTTPGet(t, c.HTTP, c.URL+"/readyz"); code != http.StatusOK || !strings.HasPrefix(body, "ready node=n1 leader=n1") {
		t.Fatalf("/readyz = %d %q", code, body)
	}
	if code, body := servertest.HTTPGet(t, c.HTTP, c.URL+"/healthz"); code != http.StatusOK || !strings.HasPrefix(body, "ok node=n1") {
		t.Fatalf("/healthz = %d %q", code, body)
	}
}

// TestReflection: the stock grpc-go reflection clients (v1 and v1alpha)
// list the services and resolve a method's file, as grpcurl list/describe do.
func TestReflection(t *testing.T) {
	t.Parallel()
	c := servertest.Start(t, servertest.Options{})
	conn := grpcConn(t, c.Addr)
	want := []string{"grpc.health.v1.Health", "leasehold.v1.ClusterService", "leasehold.v1.LeaseholdService"}

	st, err := reflectionv1.NewServerReflectionClient(conn).ServerReflectionInfo(servertest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&reflectionv1.ServerReflectionRequest{MessageRequest: &reflectionv1.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		got = append(got, s.GetName())
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("v1 list = %v, want %v", got, want)
	}
	if err := st.Send(&reflectionv1.ServerReflectionRequest{MessageRequest: &reflectionv1.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "leasehold.v1.LeaseholdService.KvPut"}}); err != nil {
		t.Fatal(err)
	}
	if resp, err = st.Recv(); err != nil || len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Fatalf("v1 describe KvPut: %v %v", resp, err)
	}
	_ = st.CloseSend()

	sta, err := reflectionv1alpha.NewServerReflectionClient(conn).ServerReflectionInfo(servertest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := sta.Send(&reflectionv1alpha.ServerReflectionRequest{MessageRequest: &reflectionv1alpha.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	respa, err := sta.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(respa.GetListServicesResponse().GetService()); n != len(want) {
		t.Fatalf("v1alpha lists %d services, want %d", n, len(want))
	}
	_ = sta.CloseSend()
}
