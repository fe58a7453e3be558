package server

import (
	"bufio"
	"context"
	"io"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/fsm"
)

// snapshotChunk is the size of one SnapshotResponse chunk.
const snapshotChunk = 256 << 10

// Snapshot streams a consistent snapshot from the leader: raft takes it
// (every acknowledged command included) and writes it to the data dir,
// and it is sent from that file, so the state is never held twice in
// memory. A follower answers not-leader with the leader's address.
func (c *clusterService) Snapshot(ctx context.Context, _ *connect.Request[pb.SnapshotRequest], stream *connect.ServerStream[pb.SnapshotResponse]) error {
	s := c.s
	if !s.node.IsLeader() {
		e := &api.Error{Code: api.CodeNotLeader, Message: "node " + s.node.ID() + " is not the leader; snapshots are taken on the leader"}
		if addr, err := s.leaderAPIAddr(); err == nil {
			e.LeaderAddr = addr
		}
		return api.ToConnect(e)
	}
	meta, rc, err := s.node.Backup(ctx)
	if err != nil {
		return api.ToConnect(toAPI(err))
	}
	defer rc.Close()
	br := bufio.NewReaderSize(rc, snapshotChunk)
	g, err := fsm.PeekHeader(br)
	if err != nil {
		return api.ToConnect(toAPI(err))
	}
	info := &pb.SnapshotInfo{
		Index: meta.Index, Term: meta.Term, Token: g.Token, NodeId: s.node.ID(),
		UnixMs: s.clock.Now().UnixMilli(), LastGrantUnixMs: g.LastGrantUnixMs, PeakRate: g.PeakRate,
	}
	if err := stream.Send(&pb.SnapshotResponse{Info: info}); err != nil {
		return err
	}
	s.cfg.Logger.Info("snapshot sent", "index", meta.Index, "bytes", meta.Size, "token", g.Token)
	buf := make([]byte, snapshotChunk)
	for {
		n, err := io.ReadFull(br, buf)
		if n > 0 {
			if err := stream.Send(&pb.SnapshotResponse{Chunk: buf[:n]}); err != nil {
				return err
			}
		}
		switch err {
		case nil:
		case io.EOF, io.ErrUnexpectedEOF:
			return nil
		default:
			return api.ToConnect(api.Errorf(api.CodeInternal, "read snapshot: %v", err))
		}
	}
}
