//lint:file-ignore SA1019 reflection v1alpha is deprecated but older grpcurl versions still use it, so it is tested.

package server_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	grpcstatus "google.golang.org/grpc/status"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/harness/servertest"
	"github.com/leasehold/leasehold/internal/server"
)

func grpcConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func httpGet(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestHealthServing: a stock grpc-go health client sees SERVING for the
// node and for each service, NOT_FOUND for an unknown one, and /readyz and
// /healthz answer 200.
func TestHealthServing(t *testing.T) {
	t.Parallel()
	c := servertest.Start(t, servertest.Options{})
	hc := healthpb.NewHealthClient(grpcConn(t, c.Addr))
	for _, svc := range []string{"", "leasehold.v1.LeaseholdService", "leasehold.v1.ClusterService"} {
		resp, err := hc.Check(ctxT(t), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("Check(%q): %v", svc, err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Check(%q) = %v, want SERVING", svc, resp.GetStatus())
		}
	}
	_, err := hc.Check(ctxT(t), &healthpb.HealthCheckRequest{Service: "no.such.Service"})
	if grpcstatus.Code(err) != codes.NotFound {
		t.Fatalf("Check(unknown) = %v, want NotFound", err)
	}
	if code, body := httpGet(t, c.HTTP, c.URL+"/readyz"); code != http.StatusOK || !strings.HasPrefix(body, "ready node=n1 leader=n1") {
		t.Fatalf("/readyz = %d %q", code, body)
	}
	if code, body := httpGet(t, c.HTTP, c.URL+"/healthz"); code != http.StatusOK || !strings.HasPrefix(body, "ok node=n1") {
		t.Fatalf("/healthz = %d %q", code, body)
	}
}

// TestHealthNotServingWithoutLeader: a node bootstrapped with a second
// voter that never starts has no leader: grpc health says NOT_SERVING and /readyz 503, while /healthz (the
// process is alive) stays 200.
func TestHealthNotServingWithoutLeader(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.DefaultConfig(t.TempDir(), ln.Addr().String())
	cfg.Logger = servertest.Logger(t)
	_, cfg.Raft.Transport = raft.NewInmemTransport("lonely")
	// The second voter never starts: no quorum, so never a leader.
	cfg.Raft.Bootstrap = []server.Peer{{ID: cfg.Raft.NodeID, RaftAddr: "lonely"}, {ID: "absent", RaftAddr: "absent"}}
	s, err := server.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-served
		_ = s.Close()
	})
	hc := healthpb.NewHealthClient(grpcConn(t, ln.Addr().String()))
	resp, err := hc.Check(ctxT(t), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("Check = %v, want NOT_SERVING", resp.GetStatus())
	}
	hcl := &http.Client{}
	defer hcl.CloseIdleConnections()
	url := "http://" + ln.Addr().String()
	if code, body := httpGet(t, hcl, url+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no leader") {
		t.Fatalf("/readyz = %d %q, want 503 no leader", code, body)
	}
	if code, _ := httpGet(t, hcl, url+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d, want 200 (liveness)", code)
	}
}

// TestReflection: the stock grpc-go reflection clients (v1 and v1alpha)
// list the services and resolve a method's file, as grpcurl list/describe do.
func TestReflection(t *testing.T) {
	t.Parallel()
	c := servertest.Start(t, servertest.Options{})
	conn := grpcConn(t, c.Addr)
	want := []string{"grpc.health.v1.Health", "leasehold.v1.ClusterService", "leasehold.v1.LeaseholdService"}

	st, err := reflectionv1.NewServerReflectionClient(conn).ServerReflectionInfo(ctxT(t))
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

	sta, err := reflectionv1alpha.NewServerReflectionClient(conn).ServerReflectionInfo(ctxT(t))
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

// TestReadyUnderWrites: a leader that keeps up with a steady stream of
// writes is ready. Its commit index runs ahead of its applied index for
// the moment each entry takes to apply; /readyz and grpc.health.v1 must
// not read that moment as "behind" (a readiness probe that did would take
// the busiest node out of service).
func TestReadyUnderWrites(t *testing.T) {
	c := servertest.Start(t, servertest.Options{})
	lease := newSession(t, c.Client, 60_000, "w").GetLeaseId()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			name := fmt.Sprintf("ready:%d", w)
			for i := 0; i < 2000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				h := acquire(t, c.Client, name, lease)
				_, err := c.Client.Release(ctxT(t), req(&pb.ReleaseRequest{Name: name, LeaseId: lease, Token: h.GetToken()}))
				mustOK(t, "Release", err)
			}
		})
	}
	defer wg.Wait()
	defer close(stop)
	hc := healthpb.NewHealthClient(grpcConn(t, c.Addr))
	for i := range 100 {
		if code, body := httpGet(t, c.HTTP, c.URL+"/readyz"); code != http.StatusOK {
			t.Fatalf("probe %d under writes: /readyz = %d %q", i, code, body)
		}
		resp, err := hc.Check(ctxT(t), &healthpb.HealthCheckRequest{})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("probe %d under writes: health Check = %v, %v", i, resp.GetStatus(), err)
		}
	}
}
