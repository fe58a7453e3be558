package httpedge_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/harness/servertest"
	"github.com/leasehold/leasehold/internal/server"
)

// lockedBuffer is a bytes.Buffer safe for a logger and the test.
type lockedBuffer = servertest.LogBuffer

// TestAccessLog: with Config.AccessLog every request gets one line with
// its path, HTTP status and, for an RPC, the leasehold code.
func TestAccessLog(t *testing.T) {
	t.Parallel()
	var buf lockedBuffer
	c := servertest.Start(t, servertest.Options{Configure: func(cfg *server.Config) {
		cfg.AccessLog = slog.New(slog.NewTextHandler(&buf, nil))
	}})
	a := servertest.NewSession(t, c.Client, 60_000, "A")
	h := servertest.Acquire(t, c.Client, "al:1", a.GetLeaseId())
	_, err := c.JSON.KvPut(servertest.Ctx(t), connect.NewRequest(&pb.KvPutRequest{Key: "al:k", Value: []byte("v"), Token: h.GetToken() + 100}))
	if err == nil {
		t.Fatal("a write with a never-issued token was accepted")
	}
	// A bidirectional stream works through the access log.
	ks := c.Client.KeepAliveStream(servertest.Ctx(t))
	servertest.MustOK(t, "KeepAliveStream send", ks.Send(&pb.KeepAliveStreamRequest{LeaseId: a.GetLeaseId()}))
	kr, err := ks.Receive()
	servertest.MustOK(t, "KeepAliveStream receive", err)
	if kr.GetLeaseId() != a.GetLeaseId() {
		t.Fatalf("KeepAliveStream answered %v", kr)
	}
	servertest.MustOK(t, "close requests", ks.CloseRequest())
	servertest.MustOK(t, "close responses", ks.CloseResponse())
	if code, body := servertest.HTTPGet(t, c.HTTP, c.URL+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d %q", code, body)
	}
	// A stream's line is written when its handler returns, which may be
	// after the client has closed its side: wait for it.
	streamLine := `path=/leasehold.v1.LeaseholdService/KeepAliveStream status=200`
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(buf.String(), streamLine) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	log := buf.String()
	for _, want := range []string{
		`path=/leasehold.v1.LeaseholdService/CreateSession status=200`,
		`proto=HTTP/2.0`,
		`path=/leasehold.v1.LeaseholdService/KvPut status=400`,
		`code=invalid-argument`,
		`path=/readyz status=200`,
		`path=/leasehold.v1.LeaseholdService/KeepAliveStream status=200`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("access log lacks %q:\n%s", want, log)
		}
	}
	if !strings.Contains(log, "CreateSession status=200 bytes=") || !strings.Contains(log, "code=ok") {
		t.Errorf("access log lacks the RPC code ok:\n%s", log)
	}
}
