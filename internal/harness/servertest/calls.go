package servertest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
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

// MustOK fails the test when err is not nil.
func MustOK(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// WantCode fails the test unless err carries the leasehold code want.
func WantCode(t testing.TB, what string, err error, want api.Code) {
	t.Helper()
	if got := api.CodeOf(err); got != want {
		t.Fatalf("%s: error %v (code %q), want code %q", what, err, got, want)
	}
}

// LogBuffer is a bytes.Buffer that a server's logger and the test may use
// at once.
type LogBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
