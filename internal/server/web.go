package server

import (
	"context"

	"connectrpc.com/connect"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/authedge"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/metrics"
	"github.com/leasehold/leasehold/internal/validate"
	"github.com/leasehold/leasehold/internal/web"
)

// publishWeb feeds the dashboard: every lock event, and every fenced KV
// write with its outcome. It runs on the apply goroutine and never blocks.
func (s *Server) publishWeb(index uint64, res *fsm.Result) {
	for _, ev := range res.Events {
		s.feed.Publish(web.Event{
			Type: metrics.EventLabel(ev.Type),
			Name: ev.Name, LeaseID: ev.LeaseID, Owner: ev.Owner, Token: ev.Token, Index: ev.Index, UnixMs: ev.UnixMs,
		})
	}
	if w, ok := metrics.KVWriteOf(res); ok {
		ev := web.Event{Type: "kv_refused", Name: w.Key, Token: w.Token, LastToken: w.LastToken, Reason: w.Result, Index: index, UnixMs: s.clock.Now().UnixMilli()}
		if w.Result == "accepted" {
			ev.Type, ev.Reason = "kv_accepted", ""
		}
		s.feed.Publish(ev)
	}
}

// webSource is the dashboard's view of this node (web.NodeSource): the
// caller as the auth middleware found it, the administrative actions run
// as the API's Release and CloseSession, the members as the API's Members.
func (s *Server) webSource() *web.NodeSource {
	return &web.NodeSource{
		NodeID:    s.node.ID(),
		Leader:    func() string { id, _ := s.node.Leader(); return id },
		Read:      s.node.Read,
		Now:       s.clock.Now,
		Remaining: s.lessor.Remaining,
		Progress: func() web.Raft {
			self := s.selfMember()
			return web.Raft{
				Role: self.GetRole(), Term: self.GetTerm(), CommitIndex: self.GetCommitIndex(), AppliedIndex: self.GetAppliedIndex(),
				LastContactMs: int64(lastContactSeconds(s) * 1000),
			}
		},
		Members: func(ctx context.Context) ([]*pb.Member, error) {
			resp, err := (&clusterService{s}).Members(ctx, connect.NewRequest(&pb.MembersRequest{}))
			if err != nil {
				return nil, err
			}
			return resp.Msg.GetMembers(), nil
		},
		Client:     s.http,
		PeerURL:    s.peerURL,
		Policies:   s.edge.Policies,
		Principal:  authedge.Principal,
		Audit:      s.audit,
		AuditAdmin: s.edge.AuditAdmin,
		Release: func(ctx context.Context, name, leaseID string, token uint64) error {
			_, err := (&lockService{s}).Release(ctx, connect.NewRequest(&pb.ReleaseRequest{Name: name, LeaseId: leaseID, Token: token}))
			return err
		},
		CloseSession: func(ctx context.Context, leaseID string) error {
			_, err := (&lockService{s}).CloseSession(ctx, connect.NewRequest(&pb.CloseSessionRequest{LeaseId: leaseID}))
			return err
		},
		MaxNameLen: validate.MaxNameLen,
	}
}
