package membership

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
)

// joinTimeout bounds how long a new node tries to be added before it
// starts: the member it joins through may be electing a leader.
const joinTimeout = 30 * time.Second

// Joining names the node that joins and the member it joins through.
type Joining struct {
	// ID, RaftAddr and APIAddr are the new node's.
	ID, RaftAddr, APIAddr string
	// Via is the API address of the member asked; Cluster is a client of
	// its ClusterService.
	Via     string
	Cluster leaseholdv1connect.ClusterServiceClient
	Logger  *slog.Logger
}

// Join asks the member j.Via to add this node (as a fresh non-voter)
// before raft starts, and returns the cluster's id. It retries while the
// cluster is unavailable, up to joinTimeout.
func Join(j Joining) (string, error) {
	req := &pb.AddMemberRequest{Id: j.ID, RaftAddr: j.RaftAddr, ApiAddr: j.APIAddr, Fresh: true}
	deadline := time.Now().Add(joinTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := j.Cluster.AddMember(ctx, connect.NewRequest(req))
		cancel()
		if err == nil {
			if res.Msg.GetClusterId() == "" {
				return "", fmt.Errorf("join through %s: the member sent no cluster id", j.Via)
			}
			j.Logger.Info("joined the cluster as a non-voter", "via", j.Via, "cluster_id", res.Msg.GetClusterId())
			return res.Msg.GetClusterId(), nil
		}
		// Adding a fresh member is idempotent, so an attempt that timed out
		// (a forward to a leader that just died) is tried again.
		code := api.CodeOf(err)
		retry := api.NotSent(err) || code == api.CodeUnavailable || code == api.CodeNotLeader ||
			code == api.CodeOutcomeUnknown || code == api.CodeDeadlineExceeded
		if !retry || time.Now().After(deadline) {
			return "", fmt.Errorf("join through %s: %w", j.Via, err)
		}
		j.Logger.Info("join: cluster not ready, retrying", "via", j.Via, "err", err)
		<-time.After(500 * time.Millisecond)
	}
}
