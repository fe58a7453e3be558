package client_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// runServer is the helper process of the memory measurements: a server in
// a process of its own, so that the test process holds only the client. It
// prints "addr HOST:PORT" and serves until its stdin closes.
func runServer() int {
	dir, err := os.MkdirTemp("", "leasehold-client-server-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	ts, err := openServer(dir, discardLogger())
	if err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		return 1
	}
	fmt.Printf("addr %s\n", ts.Addr)
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := ts.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		return 1
	}
	return 0
}

// startServerProcess runs runServer in a child process, stopped (by closing
// its stdin, then by its PID) when the test ends. It returns the server's
// address and PID.
func startServerProcess(t testing.TB) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=server")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	line := recv(t, lines, 15*time.Second, "the server process's address")
	addr, ok := strings.CutPrefix(line, "addr ")
	if !ok {
		t.Fatalf("server process said %q", line)
	}
	return addr, cmd.Process.Pid
}

// createSessions opens n sessions with ttl on c, 8 at a time.
func createSessions(t testing.TB, c *client.Client, n int, ttl time.Duration) []*client.Session {
	t.Helper()
	out := make([]*client.Session, n)
	eachOf(t, n, "new session", func(ctx context.Context, i int) (err error) {
		out[i], err = c.NewSession(ctx, client.WithTTL(ttl))
		return err
	})
	return out
}

// eachOf runs do for 0..n-1, 8 at a time, and fails t with the first
// error.
func eachOf(t testing.TB, n int, what string, do func(ctx context.Context, i int) error) {
	t.Helper()
	errs := make(chan error, n)
	var wg sync.WaitGroup
	next := make(chan int)
	ctx := testCtx(t)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				if err := do(ctx, i); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// liveBytes is the heap in use plus goroutine stacks, after a collection.
func liveBytes() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc + ms.StackInuse
}

// sessionCost measures what one more idle session costs the client
// process: bytes (heap and stacks) and goroutines, as the difference
// between warm sessions and warm+n sessions.
func sessionCost(t testing.TB, c *client.Client, warm, n int) (bytes float64, goroutines int, sessions []*client.Session) {
	t.Helper()
	sessions = createSessions(t, c, warm, time.Minute)
	b0, g0 := liveBytes(), runtime.NumGoroutine()
	sessions = append(sessions, createSessions(t, c, n, time.Minute)...)
	b1, g1 := liveBytes(), runtime.NumGoroutine()
	return (float64(b1) - float64(b0)) / float64(n), g1 - g0, sessions
}

func closeAll(sessions []*client.Session) {
	for _, s := range sessions {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.Close(ctx)
		cancel()
	}
}

// TestIdleSessionCost: an idle session costs its client at most 2 KiB and
// no goroutine: all sessions of a Client renew over one stream, driven by
// one goroutine. The server runs in another process.
func TestIdleSessionCost(t *testing.T) {
	addr, _ := startServerProcess(t)
	c := dial(t, addr)
	perSession, goroutines, sessions := sessionCost(t, c, 100, 1000)
	defer closeAll(sessions)
	t.Logf("one idle session: %.0f bytes, %d goroutines for 1000 sessions", perSession, goroutines)
	if perSession > 2048 {
		t.Errorf("an idle session costs %.0f bytes, want at most 2048", perSession)
	}
	if goroutines > 10 {
		t.Errorf("1000 more sessions started %d goroutines, want none per session", goroutines)
	}
}

// BenchmarkIdleSessionMemory reports what an idle session costs its client
// (bytes of heap and stacks per session) with b.N sessions on one Client;
// the server runs in another process.
func BenchmarkIdleSessionMemory(b *testing.B) {
	addr, _ := startServerProcess(b)
	c := dial(b, addr)
	b.ResetTimer()
	perSession, goroutines, sessions := sessionCost(b, c, 100, b.N)
	b.StopTimer()
	b.ReportMetric(perSession, "B/session")
	b.ReportMetric(float64(goroutines), "goroutines")
	closeAll(sessions)
}

// TestKeepAliveMovesOffStalledEndpoint: when the endpoint the keepalive
// stream uses stops answering (connections open, nothing comes back), the
// renewal attempt ends after its short deadline and the stream moves to the
// next endpoint, so the session and its lock survive with Done open.
func TestKeepAliveMovesOffStalledEndpoint(t *testing.T) {
	ts := startServer(t)
	proxy := newProxy(t, ts.Addr)
	c := dial(t, proxy.Addr()+","+ts.Addr)
	const ttl = time.Second
	s := newSession(t, c, client.WithTTL(ttl))
	l, err := s.Acquire(testCtx(t), "ka:stall")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close) // before the session's cleanup: Close fails over at once
	proxy.Stall()
	stop := time.After(3 * ttl)
	for done := false; !done; {
		select {
		case <-s.Done():
			t.Fatalf("session lost %v into a stalled endpoint: %v", 3*ttl, s.Err())
		case <-l.Done():
			t.Fatalf("lock lost: %v", context.Cause(l.Context()))
		case <-stop:
			done = true
		}
	}
	if d := time.Until(s.Deadline()); d < ttl/3 {
		t.Fatalf("local deadline only %v ahead after 3 TTLs on the other endpoint", d)
	}
}

// TestSessionsFallIntoStep: sessions created at different times fall into
// step after one round of renewals and share keepalive messages from then
// on: a renewal due within a quarter of its interval goes, a little early,
// with the one due now.
func TestSessionsFallIntoStep(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.Addr)
	const n = 20
	var sessions []*client.Session
	start := time.Now()
	for range n {
		sessions = append(sessions, newSession(t, c, client.WithTTL(3*time.Second), client.WithKeepAliveInterval(time.Second)))
		time.Sleep(10 * time.Millisecond) // created over 200 ms or more
	}
	spread := time.Since(start)
	defer closeAll(sessions)
	time.Sleep(1500 * time.Millisecond) // the first round of renewals
	d0 := make([]time.Time, n)
	for i, s := range sessions {
		d0[i] = s.Deadline()
	}
	before := servertest.Metric(t, ts.Addr, "leasehold_keepalive_messages_total")
	from := time.Now()
	time.Sleep(2 * time.Second) // two more rounds
	made := servertest.Metric(t, ts.Addr, "leasehold_keepalive_messages_total") - before
	rounds := int(time.Since(from)/time.Second) + 1 // a window of 2 s or more can catch a third
	for i, s := range sessions {
		if moved := s.Deadline().Sub(d0[i]); moved <= time.Second {
			t.Errorf("session %d's deadline moved %v in 2 s of renewals every second", i, moved)
		}
	}
	// Each round sends a message per group of sessions: one group per
	// quarter interval (250 ms) of the time they were created over, at
	// most. A message per session would be 40; a 50 ms window alone leaves
	// a group per 50 ms of it.
	groups := int(spread/(250*time.Millisecond)) + 1
	if made < 1 || made > float64(rounds*groups) {
		t.Fatalf("%v keepalive messages renewed %d sessions created over %v for 2 s; want 1 to %d", made, n, spread, rounds*groups)
	}
}

// farLeader is a follower whose leader the client cannot reach: it renews
// every session it is asked to and names leader as the leader.
type farLeader struct {
	leaseholdv1connect.UnimplementedLeaseholdServiceHandler
	leader  string
	streams atomic.Int32
}

func (f *farLeader) CreateSession(context.Context, *connect.Request[pb.CreateSessionRequest]) (*connect.Response[pb.CreateSessionResponse], error) {
	return connect.NewResponse(&pb.CreateSessionResponse{LeaseId: "0123456789abcdef0123456789abcdef", TtlMs: 2000}), nil
}

func (f *farLeader) CloseSession(context.Context, *connect.Request[pb.CloseSessionRequest]) (*connect.Response[pb.CloseSessionResponse], error) {
	return connect.NewResponse(&pb.CloseSessionResponse{}), nil
}

func (f *farLeader) KeepAliveStream(_ context.Context, st *connect.BidiStream[pb.KeepAliveStreamRequest, pb.KeepAliveStreamResponse]) error {
	f.streams.Add(1)
	for {
		m, err := st.Receive()
		if err != nil {
			return nil
		}
		resp := &pb.KeepAliveStreamResponse{LeaderApiAddr: f.leader}
		for _, id := range m.GetLeaseIds() {
			resp.Results = append(resp.Results, &pb.KeepAliveResult{LeaseId: id, TtlMs: 2000})
		}
		if err := st.Send(resp); err != nil {
			return nil
		}
	}
}

// TestKeepAliveStaysWhenTheLeaderIsUnreachable: a follower names a leader
// this client cannot reach (connections open, nothing comes back). The
// keepalive stream tries the leader once, gives up after the attempt's
// deadline and goes back to the follower, and does not try the leader again
// for a while: the session keeps renewing through the follower.
func TestKeepAliveStaysWhenTheLeaderIsUnreachable(t *testing.T) {
	f := &farLeader{}
	_, h := leaseholdv1connect.NewLeaseholdServiceHandler(f)
	addr := serveHandler(t, h)
	stalled := newProxy(t, addr)
	stalled.Stall()
	f.leader = stalled.Addr()
	c := dial(t, addr+","+stalled.Addr())
	s := newSession(t, c, client.WithKeepAliveInterval(200*time.Millisecond))
	select {
	case <-s.Done():
		t.Fatalf("session lost: %v", s.Err())
	case <-time.After(4 * time.Second):
	}
	// One stream before the move and one after it failed; each further
	// move to the unreachable leader would have cost another.
	if n := f.streams.Load(); n > 2 {
		t.Fatalf("%d keepalive streams opened on the follower in 4 s; want the unreachable leader tried once", n)
	}
}
