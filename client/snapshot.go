package client

import (
	"context"
	"fmt"
	"io"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
)

// SnapshotInfo describes a snapshot: its log position, token counter and
// grant clock.
type SnapshotInfo = pb.SnapshotInfo

// Snapshot takes a consistent snapshot on the leader and writes its stream
// to w. It tries the endpoints in turn until the leader answers; once the
// stream has started, a failure is returned (w then holds a partial
// stream: write to a temporary file).
func (c *Client) Snapshot(ctx context.Context, w io.Writer) (*SnapshotInfo, error) {
	c.mu.Lock()
	first := c.cur
	c.mu.Unlock()
	var last error
	for k := range c.eps {
		ep := c.eps[(first+k)%len(c.eps)]
		info, started, err := snapshotFrom(ctx, ep, w)
		if err == nil || started {
			return info, err
		}
		last = err
		if code := api.FromError(err).Code; code != api.CodeNotLeader && code != api.CodeUnavailable {
			break
		}
	}
	return nil, last
}

func snapshotFrom(ctx context.Context, ep endpoint, w io.Writer) (*SnapshotInfo, bool, error) {
	stream, err := ep.cluster.Snapshot(ctx, connect.NewRequest(&pb.SnapshotRequest{}))
	if err != nil {
		return nil, false, fmt.Errorf("client: snapshot: %w", api.FromError(err))
	}
	defer stream.Close()
	if !stream.Receive() {
		err := stream.Err()
		if err == nil {
			return nil, false, fmt.Errorf("client: snapshot from %s: %w", ep.addr, &api.Error{Code: api.CodeUnavailable, Message: "the stream ended before the info"})
		}
		return nil, false, fmt.Errorf("client: snapshot from %s: %w", ep.addr, api.FromError(err))
	}
	info := stream.Msg().GetInfo()
	if info == nil {
		return nil, true, fmt.Errorf("client: snapshot from %s: %w", ep.addr, &api.Error{Code: api.CodeInternal, Message: "the first message carries no info"})
	}
	for stream.Receive() {
		if _, err := w.Write(stream.Msg().GetChunk()); err != nil {
			return nil, true, fmt.Errorf("client: snapshot: %w", err)
		}
	}
	if err := stream.Err(); err != nil {
		return nil, true, fmt.Errorf("client: snapshot from %s: %w", ep.addr, api.FromError(err))
	}
	return info, true, nil
}
