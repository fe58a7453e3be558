package server

import (
	"context"
	"time"

	"connectrpc.com/connect"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/authedge"
	"github.com/leasehold/leasehold/internal/lockstream"
)

// LockStream serves the lock stream (internal/lockstream): each message
// runs through the unary handler of its procedure, with this server's
// authentication, limits, metrics, access log and leader as its hooks.
func (h *lockService) LockStream(ctx context.Context, stream *connect.BidiStream[pb.LockStreamRequest, pb.LockStreamResponse]) error {
	return lockstream.Serve(ctx, stream, lockstream.Config{
		Handler:   h,
		Hooks:     streamHooks{h.s},
		Workers:   h.s.work,
		Drain:     h.s.drain,
		AccessLog: h.s.cfg.AccessLog,
	})
}

// streamHooks is what the lock stream asks of the server (lockstream.Hooks).
type streamHooks struct{ s *Server }

func (k streamHooks) Revocable(ctx context.Context) (context.Context, func()) {
	return k.s.edge.Revocable(ctx, leaseholdv1connect.LeaseholdServiceLockStreamProcedure, nil)
}

func (k streamHooks) RevokedErr(ctx context.Context) error { return authedge.Revoked(ctx) }

func (k streamHooks) AuthState() any { return k.s.edge.Policies() }

func (k streamHooks) Reauthenticate(ctx context.Context) (context.Context, error) {
	return k.s.edge.Reauthenticate(ctx, leaseholdv1connect.LeaseholdServiceLockStreamProcedure)
}

func (k streamHooks) AllowOp(ctx context.Context) error {
	if err := k.s.lim.AllowOp(principal(ctx)); err != nil {
		return err
	}
	return nil
}

func (k streamHooks) AuthorizeOp(ctx context.Context, proc string, msg any) (any, error) {
	return k.s.edge.AuthorizeOp(ctx, proc, msg)
}

func (k streamHooks) FinishOp(ctx context.Context, pol any, proc string, res any, err error) {
	p, _ := pol.(*auth.Policies)
	k.s.edge.FinishOp(ctx, p, proc, res, err)
}

func (k streamHooks) ObserveOp(ctx context.Context, proc string, start time.Time, err error) {
	k.s.met.ObserveOp(ctx, proc, start, err)
}

func (k streamHooks) LeaderHint() string { return k.s.leaderHint() }
