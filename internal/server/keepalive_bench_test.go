package server_test

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// BenchmarkKeepAliveStream renews 10,000 sessions over one KeepAliveStream
// in batches of 1000, as the Go client does: the stream handler and the
// lessor's in-memory renewal, no log entry. It reports wall and CPU time
// per session renewal (CPU of the whole process: the server and the
// test's gRPC client).
func BenchmarkKeepAliveStream(b *testing.B) {
	c := servertest.Start(b, servertest.Options{Logger: slog.New(slog.DiscardHandler)})
	const sessions, batch = 10_000, 1000
	ids := make([]string, sessions)
	var wg sync.WaitGroup
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				res, err := c.Client.CreateSession(context.Background(), req(&pb.CreateSessionRequest{TtlMs: time.Hour.Milliseconds()}))
				if err != nil {
					b.Error(err)
					continue
				}
				ids[i] = res.Msg.GetLeaseId()
			}
		})
	}
	for i := range sessions {
		next <- i
	}
	close(next)
	wg.Wait()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// As the Go client's keepalive stream: no gzip on renewal answers.
	var proto http.Protocols
	proto.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &proto}}
	defer hc.CloseIdleConnections()
	kc := leaseholdv1connect.NewLeaseholdServiceClient(hc, c.URL, connect.WithGRPC(), connect.WithAcceptCompression("gzip", nil, nil))
	stream := kc.KeepAliveStream(ctx)
	defer func() { _ = stream.CloseRequest(); _ = stream.CloseResponse() }()
	renewals := 0
	cpu0 := servertest.ProcessCPU(b)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		k := (i * batch) % sessions
		if err := stream.Send(&pb.KeepAliveStreamRequest{LeaseIds: ids[k : k+batch]}); err != nil {
			b.Fatal(err)
		}
		r, err := stream.Receive()
		if err != nil {
			b.Fatal(err)
		}
		for _, res := range r.GetResults() {
			if res.GetErrorCode() != "" {
				b.Fatalf("renewal of %s refused: %s", res.GetLeaseId(), res.GetErrorCode())
			}
		}
		renewals += batch
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(renewals), "ns/renewal")
	b.ReportMetric(float64((servertest.ProcessCPU(b)-cpu0).Nanoseconds())/float64(renewals), "cpu-ns/renewal")
}
