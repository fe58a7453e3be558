package raftnode

import (
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// newNetworkTransport is raft's TCP transport over sl, its replication
// pipelines ending at their first failed append (endingPipeline).
func newNetworkTransport(sl raft.StreamLayer, logger hclog.Logger) raft.Transport {
	return networkTransport{raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: sl, MaxPool: 8, Timeout: 5 * time.Second, Logger: logger})}
}

// networkTransport is raft's TCP transport with endingPipelines.
type networkTransport struct{ *raft.NetworkTransport }

func (t networkTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return newEndingPipeline(p), nil
}

// endingPipeline closes its pipeline as it hands raft the first failed
// append, so that raft's replication to that follower falls back to
// single appends and recovers.
//
// raft stops reading a pipeline's answers at the first failed one, yet
// may still send through it before it notices. The transport's pipeline
// has no room to queue answers (with raft's default of two appends in
// flight): its reader then waits forever to deliver the next answer, the
// send waits forever for the reader, and nothing closes the pipeline.
// The follower would get heartbeats and never another entry, until the
// leader changes (hashicorp/raft issue 612). A follower's append fails
// when its disk refuses the entries or its log lacks the entry before
// them, as after a restart.
type endingPipeline struct {
	raft.AppendPipeline
	answers chan raft.AppendFuture
	closed  chan struct{}
	once    sync.Once
}

func newEndingPipeline(p raft.AppendPipeline) *endingPipeline {
	e := &endingPipeline{AppendPipeline: p, answers: make(chan raft.AppendFuture), closed: make(chan struct{})}
	go e.forward()
	return e
}

// forward hands raft the pipeline's answers, until the first failed one.
func (e *endingPipeline) forward() {
	for {
		select {
		case f := <-e.AppendPipeline.Consumer():
			resp := f.Response()
			failed := f.Error() != nil || !resp.Success || resp.Term > f.Request().Term
			if failed {
				_ = e.AppendPipeline.Close() // sends from now on fail
			}
			select {
			case e.answers <- f:
			case <-e.closed:
				return
			}
			if failed {
				return
			}
		case <-e.closed:
			return
		}
	}
}

func (e *endingPipeline) Consumer() <-chan raft.AppendFuture { return e.answers }

func (e *endingPipeline) Close() error {
	e.once.Do(func() { close(e.closed) })
	return e.AppendPipeline.Close()
}
