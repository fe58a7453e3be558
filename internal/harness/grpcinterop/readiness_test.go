package grpcinterop_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"github.com/hashicorp/raft"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/harness/servertest"
	"github.com/leasehold/leasehold/internal/server"
)

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
	resp, err := hc.Check(servertest.Ctx(t), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("Check = %v, want NOT_SERVING", resp.GetStatus())
	}
	hcl := &http.Client{}
	defer hcl.CloseIdleConnections()
	url := "http://" + ln.Addr().String()
	if code, body := servertest.HTTPGet(t, hcl, url+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no leader") {
		t.Fatalf("/readyz = %d %q, want 503 no leader", code, body)
	}
	if code, _ := servertest.HTTPGet(t, hcl, url+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d, want 200 (liveness)", code)
	}
}

// TestReadyUnderWrites: a leader that keeps up with a steady stream of
// writes is ready. Its commit index runs ahead of its applied index for
// the moment each entry takes to apply; /readyz and grpc.health.v1 must
// not read that moment as "behind" (a readiness probe that did would take
// the busiest node out of service).
func TestReadyUnderWrites(t *testing.T) {
	c := servertest.Start(t, servertest.Options{})
	lease := servertest.NewSession(t, c.Client, 60_000, "w").GetLeaseId()
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
				h := servertest.Acquire(t, c.Client, name, lease)
				_, err := c.Client.Release(servertest.Ctx(t), connect.NewRequest(&pb.ReleaseRequest{Name: name, LeaseId: lease, Token: h.GetToken()}))
				if err != nil {
					t.Errorf("Release: %v", err)
					return
				}
			}
		})
	}
	defer wg.Wait()
	defer close(stop)
	hc := healthpb.NewHealthClient(grpcConn(t, c.Addr))
	for i := range 100 {
		if code, body := servertest.HTTPGet(t, c.HTTP, c.URL+"/readyz"); code != http.StatusOK {
			t.Fatalf("probe %d under writes: /readyz = %d %q", i, code, body)
		}
		resp, err := hc.Check(servertest.Ctx(t), &healthpb.HealthCheckRequest{})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("probe %d under writes: health Check = %v, %v", i, resp.GetStatus(), err)
		}
	}
}
