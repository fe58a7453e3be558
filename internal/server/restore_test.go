package server_test

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// A node whose state is replaced by a snapshot never applied the entries
// in between, so it published none of their events. Its watchers must end
// with compacted (not wait on silently), and a queued Acquire must
// re-check the state: here the snapshot holds its grant, which no event
// announced.
func TestSnapshotRestoreEndsWatchesAndWakesWaiters(t *testing.T) {
	t.Parallel()
	c, a, b, ha := heldAndWanted(t, "restored")
	ctx := ctxT(t)

	const waitID = 0x5eed
	queued := async(func() error {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := c.Client.Acquire(actx, req(&pb.AcquireRequest{Name: "restored", LeaseId: b.GetLeaseId(), WaitId: waitID}))
		if err == nil && resp.Msg.GetHolding().GetLeaseId() != b.GetLeaseId() {
			t.Errorf("B's Acquire returned %v", resp.Msg.GetHolding())
		}
		return err
	})
	waitQueued(t, c.Client, "restored", b.GetLeaseId())

	stream, err := c.Client.Watch(ctx, req(&pb.WatchRequest{}))
	mustOK(t, "Watch", err)
	defer stream.Close()
	stream.ResponseHeader() // registered

	// The snapshot to install: today's state, plus A's release, which
	// grants the name to B's waiting request.
	r := c.Server().Node().Raft()
	snap := r.Snapshot()
	mustOK(t, "Snapshot", snap.Error())
	meta, rc, err := snap.Open()
	mustOK(t, "open snapshot", err)
	data, err := io.ReadAll(rc)
	rc.Close()
	mustOK(t, "read snapshot", err)
	m := fsm.New(fsm.DefaultLimits())
	mustOK(t, "restore copy", m.Restore(data))
	res := m.Apply(meta.Index+1, &fsmpb.Command{Op: &fsmpb.Command_Release{Release: &fsmpb.Release{Name: "restored", LeaseId: a.GetLeaseId(), Token: ha.GetToken()}}})
	if res.Err != nil || res.Holding.GetLeaseId() != b.GetLeaseId() || res.Holding.GetWaitId() != waitID {
		t.Fatalf("release on the copy: %v, next holding %v", res.Err, res.Holding)
	}
	data, err = m.Snapshot()
	mustOK(t, "snapshot copy", err)
	meta.Size = int64(len(data))
	mustOK(t, "install snapshot", r.Restore(meta, bytes.NewReader(data), 5*time.Second))

	if err := <-queued; err != nil {
		t.Fatalf("B's queued Acquire after the snapshot granted it: %v (code %s), want the grant", err, api.CodeOf(err))
	}
	got := make(chan error, 1)
	go func() {
		for stream.Receive() {
		}
		got <- stream.Err()
	}()
	select {
	case err := <-got:
		wantCode(t, "the watch after a snapshot install", err, api.CodeCompacted)
		// The history restarts after the snapshot: a watch from before it
		// is told so, not replayed with a hole.
		old, err := c.Client.Watch(ctx, req(&pb.WatchRequest{FromIndex: meta.Index}))
		mustOK(t, "Watch from before the snapshot", err)
		defer old.Close()
		// It gets the state instead: B holds the name, which no event said.
		if !old.Receive() {
			t.Fatalf("a watch from index %d, before the snapshot, ended without the state: %v", meta.Index, old.Err())
		}
		st := old.Msg().GetCompacted()
		if st == nil || st.GetIndex() <= meta.Index || len(st.GetLocks()) != 1 || st.GetLocks()[0].GetHolder().GetLeaseId() != b.GetLeaseId() {
			t.Fatalf("a watch from index %d, before the snapshot, got %v; want the state after it with B holding", meta.Index, old.Msg())
		}
		if old.Receive() {
			t.Fatalf("after the state got %v, want the end", old.Msg())
		}
		wantCode(t, "a watch from before the snapshot", old.Err(), api.CodeCompacted)
	case <-time.After(10 * time.Second):
		t.Fatal("the watch went on silently after the node installed a snapshot")
	}
}
