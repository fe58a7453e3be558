package raftnode

import (
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestPipelineEndsAfterARejectedAppend drives a replication pipeline the
// way raft's leader does: raft stops reading the pipeline's answers at
// the first failed one (a follower whose disk refused the entries, or
// whose log lacks the previous entry) and may still send once more
// before it notices. That send must end (with an error: the pipeline is
// over) rather than wait forever, which would leave the follower getting
// heartbeats and never another entry.
func TestPipelineEndsAfterARejectedAppend(t *testing.T) {
	leaderStream, _ := newTestStream(t, nil, "c1", "n1")
	followerStream, _ := newTestStream(t, nil, "c1", "n2")
	leader := newNetworkTransport(leaderStream, newHCLogger(testLogger(t)))
	follower := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: followerStream, Timeout: 5 * time.Second, Logger: newHCLogger(testLogger(t))})
	t.Cleanup(func() {
		closeTransport(leader)
		closeTransport(follower)
	})

	// The follower accepts the first append and refuses the second, as a
	// follower does whose log store failed; it accepts every later one.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	wg.Go(func() {
		for n := 1; ; n++ {
			select {
			case rpc := <-follower.Consumer():
				rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: n != 2, LastLog: uint64(n)}, nil)
			case <-stop:
				return
			}
		}
	})

	p, err := leader.AppendEntriesPipeline("n2", follower.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// raft's pipelineDecode: it returns at the first failed answer.
	answers := make(chan *raft.AppendEntriesResponse, 8)
	wg.Go(func() {
		for {
			select {
			case f := <-p.Consumer():
				resp := f.Response()
				answers <- resp
				if f.Error() != nil || !resp.Success {
					return
				}
			case <-stop:
				return
			}
		}
	})

	send := func(i uint64) error {
		done := make(chan error, 1)
		go func() {
			_, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: 1, PrevLogEntry: i, Entries: []*raft.Log{{Index: i + 1, Term: 1}}}, new(raft.AppendEntriesResponse))
			done <- err
		}()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatalf("append %d through the pipeline still waits after 10 s", i+1)
			return nil
		}
	}
	if err := send(0); err != nil {
		t.Fatal(err)
	}
	if a := <-answers; !a.Success {
		t.Fatalf("first append answered %+v, want success", a)
	}
	var last error
	for i := uint64(1); i < 4 && last == nil; i++ {
		last = send(i)
	}
	if a := <-answers; a.Success {
		t.Fatalf("second append answered %+v, want the refusal", a)
	}
	if last == nil {
		t.Fatal("every append after the refusal went through the pipeline; want it ended")
	}
	t.Logf("the send after the refusal: %v", last)
}
