package server

import (
	"encoding/json"
	"net/http"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/httpedge"
	"github.com/leasehold/leasehold/sequencer"
)

// Signed sequencers.
//
// A session created with CreateSessionRequest.sequencers gets, with every grant answered by
// Acquire or TryAcquire, Holding.sequencer: (name, mode, slot, token, lease id, grant time,
// cluster id) signed by Config.Signer (package sequencer), which a resource verifies offline. The flag is
// part of the replicated session, so every leader signs for it. Signing happens at the edge,
// on the leader, after the grant was applied: the plain-token path never pays for it.
//
// KeysPath serves the public key set ({"cluster_id", "keys": [...]}, package sequencer's key
// set file) for resources to fetch and pin; 404 not-found when the node has no signer.

// KeysPath is the HTTP endpoint of the public key set.
const KeysPath = "/v1/keys"

// checkSequencers refuses a session that asks for sequencers from a node without a signer.
func (s *Server) checkSequencers(want bool) error {
	if want && s.cfg.Signer == nil {
		return api.Errorf(api.CodeInvalidArgument, "sequencers: this cluster has no signing key (serve --sequencer-key)")
	}
	return nil
}

// signed fills h.Sequencer when h's session asked for sequencers, and returns h.
func (s *Server) signed(h *pb.Holding) *pb.Holding {
	if h == nil || s.cfg.Signer == nil {
		return h
	}
	var want bool
	s.node.Read(func(m *fsm.Machine) { want = m.Session(h.GetLeaseId()).GetSequencers() })
	if !want {
		return h
	}
	mode := sequencer.Exclusive
	if h.GetMode() == pb.LockMode_LOCK_MODE_SHARED {
		mode = sequencer.Shared
	}
	b, err := s.cfg.Signer.Sign(sequencer.Sequencer{
		Name: h.GetName(), Token: h.GetToken(), LeaseID: h.GetLeaseId(), IssuedUnixMs: h.GetAcquiredUnixMs(),
		Mode: mode, Slot: h.GetSlot(),
	})
	if err != nil { // a validated name and lease id always sign; this is a bug
		s.cfg.Logger.Error("sequencer: cannot sign a grant", "name", h.GetName(), "token", h.GetToken(), "err", err)
		return h
	}
	h.Sequencer = b
	return h
}

func (s *Server) serveKeys(w http.ResponseWriter, _ *http.Request) {
	if s.cfg.Signer == nil {
		httpedge.WriteJSON(w, http.StatusNotFound, map[string]any{"error": map[string]string{
			"code": string(api.CodeNotFound), "message": "this cluster has no signing key (serve --sequencer-key)"}})
		return
	}
	b, err := json.Marshal(s.cfg.Signer.KeySet())
	if err != nil {
		httpedge.WriteAPIError(w, api.Errorf(api.CodeInternal, "%v", err))
		return
	}
	httpedge.WriteJSON(w, http.StatusOK, json.RawMessage(b))
}
