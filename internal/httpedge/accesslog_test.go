package httpedge_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/harness/servertest"
	"github.com/leasehold/leasehold/internal/server"
)

// lockedBuffer is a bytes.Buffer safe for a logger and the test.
type lockedBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestAccessLog: with Config.AccessLog every request gets one line with
// its path, HTTP status and, for an RPC, the leasehold code.
func TestAccessLog(t *testing.T) {
	t.Parallel()
	var buf lockedBuffer
	c := servertest.Start(t, servertest.Options{Configure: func(cfg *server.Config) {
		cfg.AccessLog = slog.New(slog.NewTextHandler(&buf, nil))
	}})
	a := newSession(t, c.Client, 60_000, "A")
	h := acquire(t, c.Client, "al:1", a.GetLeaseId())
	_, err := c.JSON.KvPut(ctxT(t), req(&pb.KvPutRequest{Key: "al:k", Value: []byte("v"), Token: h.GetToken() + 100}))
	if err == nil {
		t.Fatal("a write with a never-issued token was accepted")
	}
	// A bidirectional stream works through the access log.
	ks := c.Client.KeepAliveStream(ctxT(t))
	mustOK(t, "KeepAliveStream send", ks.Send(&pb.KeepAliveStreamRequest{LeaseId: a.GetLeaseId()}))
	kr, err := ks.Receive()
	mustOK(t, "KeepAliveStream receive", err)
	if kr.GetLeaseId() != a.GetLeaseId() {
		t.Fatalf("KeepAliveStream answered %v", kr)
	}
	mustOK(t, "close requests", ks.CloseRequest())
	mustOK(t, "close responses", ks.CloseResponse())
	if code, body := httpGet(t, c.HTTP, c.URL+"/readyz"); code != http.StatusOK {
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
