package client

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/harness/servertest"
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

// releases sends n Releases at once, each with a token of its own; their
// outcomes come on the channel.
func releases(ctx context.Context, c *Client, n int) <-chan error {
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := call(ctx, c, "release", asEndpoint, releaseOp, &pb.ReleaseRequest{Name: "x", LeaseId: "l", Token: uint64(i + 1)})
			errs <- err
		}()
	}
	return errs
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
	errs := releases(ctx, c, n)
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

// recordingLocks answers every request of its LockStream at once as a
// Release, listing batches in its response header when batch is set, and
// records how many requests each message carried (0: one, not a batch).
type recordingLocks struct {
	leaseholdv1connect.UnimplementedLeaseholdServiceHandler
	batch bool

	mu    sync.Mutex
	sizes []int
}

func (rl *recordingLocks) LockStream(_ context.Context, bs *connect.BidiStream[pb.LockStreamRequest, pb.LockStreamResponse]) error {
	ops := api.StreamOpsSession
	if rl.batch {
		ops += "," + api.StreamOpsBatch
	}
	bs.ResponseHeader().Set(api.StreamOpsHeader, ops)
	for {
		m, err := bs.Receive()
		if err != nil {
			return nil
		}
		rl.mu.Lock()
		rl.sizes = append(rl.sizes, len(m.GetBatch()))
		rl.mu.Unlock()
		reqs := m.GetBatch()
		if len(reqs) == 0 {
			reqs = []*pb.LockStreamRequest{m}
		}
		for _, r := range reqs {
			if err := bs.Send(&pb.LockStreamResponse{Id: r.GetId(), Op: &pb.LockStreamResponse_Release{Release: &pb.ReleaseResponse{}}}); err != nil {
				return nil
			}
		}
	}
}

// Requests queued together go in one message to a server that takes
// batches, never more than api.StreamBatchMax, each answered; a server
// that does not list batches gets every request in a message of its own.
func TestLockStreamBatches(t *testing.T) {
	for _, batch := range []bool{true, false} {
		rl := &recordingLocks{batch: batch}
		c, err := Dial(context.Background(), serveLocks(t, rl))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		calls := 0
		for round := 0; round < 50; round++ {
			const n = 64
			errs := releases(ctx, c, n)
			for range n {
				if err := <-errs; err != nil {
					t.Fatalf("batch %v: a Release answered %v", batch, err)
				}
			}
			calls += n
			rl.mu.Lock()
			batched := slices.Max(rl.sizes) > 1
			rl.mu.Unlock()
			if batched || !batch && round == 9 {
				break
			}
		}
		cancel()
		_ = c.Close()
		rl.mu.Lock()
		requests, most := 0, slices.Max(rl.sizes)
		for _, s := range rl.sizes {
			requests += max(s, 1)
		}
		rl.mu.Unlock()
		switch {
		case requests != calls:
			t.Fatalf("batch %v: the server received %d requests for %d calls", batch, requests, calls)
		case batch && most < 2:
			t.Fatalf("%d calls in rounds of 64 concurrent ones: no message carried more than one request", calls)
		case batch && most > api.StreamBatchMax:
			t.Fatalf("a message carried %d requests, more than %d", most, api.StreamBatchMax)
		case !batch && most != 0:
			t.Fatalf("a server that does not take batches got a message with a batch of %d", most)
		}
		t.Logf("batch %v: %d calls in %d messages, at most %d in one", batch, calls, len(rl.sizes), most)
	}
}
