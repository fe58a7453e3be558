package server

import (
	"context"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/authedge"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/validate"
)

// listLocked returns up to limit locks of prefix from fm, with the owner
// labels of their waiters. The caller holds the state's read lock.
func (s *Server) listLocked(fm *fsm.Machine, prefix string, limit int) ([]*pb.LockInfo, bool) {
	infos, truncated := fm.List(prefix, limit)
	owners := map[string]string{}
	for _, info := range infos {
		for _, w := range info.Waiters {
			owners[w.LeaseId] = fm.Owner(w.LeaseId)
		}
	}
	out := make([]*pb.LockInfo, 0, len(infos))
	for _, info := range infos {
		out = append(out, s.lockInfoPB(info, owners))
	}
	return out, truncated
}

// list returns up to limit locks of prefix, as the caller in ctx may
// read them: refused with resource-exhausted when its list-rate is spent
// (admission/meter.go), else charged the locks returned.
func (s *Server) list(ctx context.Context, prefix string, limit int) ([]*pb.LockInfo, bool, error) {
	used, err := s.lim.ListCharge(ctx)
	if err != nil {
		return nil, false, err
	}
	var locks []*pb.LockInfo
	var truncated bool
	s.node.Read(func(fm *fsm.Machine) { locks, truncated = s.listLocked(fm, prefix, limit) })
	used(len(locks))
	return locks, truncated, nil
}

// watchState is the state of prefix's locks at the last entry applied on
// this node: what replaces the events a watch can no longer be sent. It
// fails with unavailable while the node has restored a snapshot and applied
// no entry since (the index of that state is not known yet).
func (s *Server) watchState(ctx context.Context, prefix string) (*pb.WatchCompacted, error) {
	used, err := s.lim.ListCharge(ctx) // admission/meter.go
	if err != nil {
		return nil, err
	}
	var out *pb.WatchCompacted
	s.node.ReadAt(func(fm *fsm.Machine, applied uint64) {
		if applied == 0 {
			return
		}
		locks, truncated := s.listLocked(fm, prefix, validate.MaxListLimit)
		out = &pb.WatchCompacted{Index: applied, Locks: locks, Truncated: truncated}
	})
	if out == nil {
		used(0)
		return nil, api.Errorf(api.CodeUnavailable, "this node installed a snapshot and applied no entry since; watch again")
	}
	used(len(out.Locks))
	return out, nil
}

// endWatch ends a watch stream with err. When err is compacted, the last
// response carries the prefix's current state first, so that the caller
// can resync and watch again from the index after it; or, when the
// caller's list-rate is spent, the stream ends with resource-exhausted
// instead (the caller watches again later and gets the state then).
func (s *Server) endWatch(ctx context.Context, stream *connect.ServerStream[pb.WatchResponse], prefix string, err error) error {
	if api.CodeOf(err) != api.CodeCompacted {
		return api.ToConnect(err)
	}
	state, serr := s.watchState(ctx, prefix)
	if serr != nil {
		return api.ToConnect(serr)
	}
	if serr := stream.Send(&pb.WatchResponse{Compacted: state}); serr != nil {
		return serr
	}
	return api.ToConnect(err)
}

// Watch streams the events this node applies, from the history when
// from_index is set (internal/hub); every node applies every entry, so any node
// can serve it.
func (h *lockService) Watch(ctx context.Context, req *connect.Request[pb.WatchRequest], stream *connect.ServerStream[pb.WatchResponse]) error {
	if err := validate.Prefix(req.Msg.GetPrefix()); err != nil {
		return api.ToConnect(err)
	}
	release, err := h.s.lim.WatchOpen(ctx) // admission/meter.go
	if err != nil {
		return err
	}
	defer release()
	ctx, stop := h.s.edge.Revocable(ctx, leaseholdv1connect.LeaseholdServiceWatchProcedure, req.Msg)
	defer stop()
	w, covered, err := h.s.hub.Watch(req.Msg.GetPrefix(), req.Msg.GetFromIndex())
	if err != nil {
		return h.s.endWatch(ctx, stream, req.Msg.GetPrefix(), err)
	}
	defer h.s.hub.Unwatch(w)
	progress := req.Msg.GetProgressNotify()
	// Tell the caller the watch is registered: the first progress
	// response, or the headers alone.
	if progress {
		err = stream.Send(&pb.WatchResponse{AppliedIndex: covered})
	} else {
		err = stream.Conn().Send(nil)
	}
	if err != nil {
		return err
	}
	var tick <-chan time.Time
	if progress {
		t := time.NewTicker(h.s.cfg.WatchProgressInterval)
		defer t.Stop()
		tick = t.C
	}
	idle := true               // nothing sent since the last tick
	var paced <-chan time.Time // set while watch-event-rate holds the stream back
	for {
		wake, ticks := w.Wake(), tick
		if paced != nil {
			wake, ticks = nil, nil
		} else {
			evs, now := h.s.hub.Next(w, 64)
			for _, ev := range evs {
				if err := stream.Send(&pb.WatchResponse{Event: &pb.Event{Type: ev.Type, Name: ev.Name, LeaseId: ev.LeaseID, Owner: ev.Owner, Token: ev.Token, Index: ev.Index, UnixMs: ev.UnixMs, Value: []byte(ev.Value)}}); err != nil {
					return err
				}
				idle = false
			}
			if now != 0 {
				covered = max(covered, now)
			}
			if len(evs) != 0 {
				if d := h.s.lim.WatchSent(ctx, len(evs)); d > 0 { // admission/meter.go
					paced = h.s.clock.After(d)
				}
				continue
			}
		}
		select {
		case <-paced:
			paced = nil
		case <-ctx.Done():
			return authedge.Revoked(ctx)
		case <-h.s.drain:
			return api.ToConnect(api.Errorf(api.CodeUnavailable, "server shutting down"))
		case <-w.Ended():
			return h.s.endWatch(ctx, stream, req.Msg.GetPrefix(), w.Err())
		case <-wake:
		case <-ticks:
			if idle {
				if err := stream.Send(&pb.WatchResponse{AppliedIndex: covered}); err != nil {
					return err
				}
			}
			idle = true
		}
	}
}
