package server_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/clock"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

type client = leaseholdv1connect.LeaseholdServiceClient

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// startManual starts a server whose timers run on a manual clock.
func startManual(t *testing.T, opts servertest.Options) (*servertest.Cluster, *clock.Manual) {
	t.Helper()
	clk := clock.NewManual(epoch)
	opts.Clock = clk
	return servertest.Start(t, opts), clk
}

func ctxT(t *testing.T) context.Context { return servertest.Ctx(t) }

func req[T any](m *T) *connect.Request[T] { return connect.NewRequest(m) }

// wantCode fails unless err carries the leasehold code want.
func wantCode(t *testing.T, what string, err error, want api.Code) {
	t.Helper()
	servertest.WantCode(t, what, err, want)
}

func mustOK(t *testing.T, what string, err error) {
	t.Helper()
	servertest.MustOK(t, what, err)
}

func newSession(t *testing.T, c client, ttlMs int64, owner string) *pb.CreateSessionResponse {
	t.Helper()
	return servertest.NewSession(t, c, ttlMs, owner)
}

func acquire(t *testing.T, c client, name, lease string) *pb.Holding {
	t.Helper()
	return servertest.Acquire(t, c, name, lease)
}

func status(t *testing.T, c client, name string) *pb.LockInfo {
	t.Helper()
	resp, err := c.Status(ctxT(t), req(&pb.StatusRequest{Name: name}))
	mustOK(t, "Status "+name, err)
	return resp.Msg.GetLock()
}

func waiters(info *pb.LockInfo) []string {
	var out []string
	for _, w := range info.GetWaiters() {
		out = append(out, w.GetLeaseId())
	}
	return out
}

// async runs f in a goroutine and returns a channel with its error.
func async(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// waitQueued waits until the waiters of name are exactly want, in order.
func waitQueued(t *testing.T, c client, name string, want ...string) {
	t.Helper()
	err := servertest.Eventually(10*time.Second, func() bool {
		got := waiters(status(t, c, name))
		if len(got) != len(want) {
			return false
		}
		for i := range got {
			if got[i] != want[i] {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("waiters of %s are %v, want %v", name, waiters(status(t, c, name)), want)
	}
}

// lockedBuffer is a bytes.Buffer safe for a logger and the test.
type lockedBuffer = servertest.LogBuffer

func httpGet(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	return servertest.HTTPGet(t, c, url)
}
