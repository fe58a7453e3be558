package client

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/servertest"
)

// abortingLocks reads n requests from a LockStream and then resets the
// stream without answering any.
type abortingLocks struct {
	leaseholdv1connect.UnimplementedLeaseholdServiceHandler
	n int
}

func (a abortingLocks) LockStream(_ context.Context, bs *connect.BidiStream[pb.LockStreamRequest, pb.LockStreamResponse]) error {
	for range a.n {
		if _, err := bs.Receive(); err != nil {
			return err
		}
	}
	panic(http.ErrAbortHandler)
}

func serveLocks(t *testing.T, h leaseholdv1connect.LeaseholdServiceHandler) string {
	mux := http.NewServeMux()
	mux.Handle(leaseholdv1connect.NewLeaseholdServiceHandler(h))
	return servertest.Serve(t, mux)
}

// A stream that breaks with requests written to it answers each of them
// as a reply lost in transit: a Release (not retried) is outcome-unknown,
// never a refusal or a hang.
func TestLockStreamBreakIsOutcomeUnknown(t *testing.T) {
	const n = 3
	addr := serveLocks(t, abortingLocks{n: n})
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := call(ctx, c, "release", asEndpoint, releaseOp, &pb.ReleaseRequest{Name: "x", LeaseId: "l", Token: uint64(i + 1)})
			errs <- err
		}()
	}
	for range n {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrOutcomeUnknown) {
				t.Fatalf("a Release in flight when the stream broke = %v (code %s), want outcome-unknown", err, api.CodeOf(err))
			}
		case <-ctx.Done():
			t.Fatal("a Release in flight when the stream broke was never answered")
		}
	}
}

// A request still queued for the sender when the stream breaks was
// certainly not sent: unavailable, which call retries elsewhere. One
// written to the stream is outcome-unknown; a stream a leasehold server
// ended with its own error passes that error on.
func TestLockStreamFailClassifies(t *testing.T) {
	c := &Client{eps: []endpoint{{addr: "127.0.0.1:1"}}}
	req := &pb.ReleaseRequest{}
	for _, tc := range []struct {
		name   string
		sent   bool
		broken error
		want   api.Code
	}{
		{"queued, never sent", false, connect.NewError(connect.CodeUnavailable, errors.New("reset")), api.CodeUnavailable},
		{"sent, stream reset", true, connect.NewError(connect.CodeUnavailable, errors.New("reset")), api.CodeOutcomeUnknown},
		{"sent, stream cut with an incomplete answer", true, connect.NewError(connect.CodeInternal, errors.New("incomplete envelope")), api.CodeOutcomeUnknown},
		{"sent, the server ended the stream", true, api.ToConnect(api.Errorf(api.CodeUnavailable, "server shutting down")), api.CodeUnavailable},
		{"sent, refused at the stream's start", true, api.ToConnect(api.Errorf(api.CodePermissionDenied, "no")), api.CodePermissionDenied},
	} {
		st := &lockStream{slot: &lockSlot{c: c}, dead: make(chan struct{}), pending: map[uint64]*lockReq{}}
		r := &lockReq{msg: &pb.LockStreamRequest{Id: 1}, sent: tc.sent, done: make(chan struct{})}
		st.pending[1] = r
		st.fail(tc.broken)
		select {
		case <-r.done:
		default:
			t.Fatalf("%s: the request was not answered", tc.name)
		}
		if got := classify(context.Background(), r.err, req).Code; got != tc.want {
			t.Errorf("%s: %v classified %s, want %s", tc.name, r.err, got, tc.want)
		}
	}
}
