package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/internal/fsm"
)

// TokenCounterPath is the HTTP endpoint that answers the newest token the cluster has issued,
// as {"token": N}. A resource that cannot verify signed sequencers (the gateway's
// --token-counter) uses it to refuse tokens the cluster never issued. The read is
// linearizable: the leader confirms its leadership and waits for every committed entry, so
// every token granted before the request was sent is at most N. A follower fetches the answer
// from the leader. Errors are {"error": {"code", "message"}} with 503 (unavailable,
// not-leader) or 500.
const TokenCounterPath = "/v1/token-counter"

// tokenCounterBody is the endpoint's answer.
type tokenCounterBody struct {
	Token uint64 `json:"token"`
}

func (s *Server) serveTokenCounter(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if s.node.IsLeader() {
		err := s.node.ReadIndex(ctx)
		if err == nil {
			var n uint64
			s.node.Read(func(m *fsm.Machine) { n = m.Token() })
			writeJSON(w, http.StatusOK, tokenCounterBody{Token: n})
			return
		}
		if !isNotLeader(err) {
			writeAPIError(w, api.FromError(toAPI(err)))
			return
		}
	}
	if by := r.Header.Get(forwardedHeader); by != "" {
		writeAPIError(w, api.Errorf(api.CodeNotLeader, "node %s is not the leader (request forwarded by %s)", s.node.ID(), by))
		return
	}
	addr, err := s.leaderAPIAddr()
	if err != nil {
		writeAPIError(w, api.FromError(err))
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.peerURL(addr)+TokenCounterPath, nil)
	if err != nil {
		writeAPIError(w, api.Errorf(api.CodeInternal, "%v", err))
		return
	}
	req.Header.Set(forwardedHeader, s.node.ID())
	resp, err := s.http.Do(req)
	if err != nil {
		writeAPIError(w, api.Errorf(api.CodeUnavailable, "asking the leader: %v", err))
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		writeAPIError(w, api.Errorf(api.CodeUnavailable, "reading the leader's answer: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v) // cannot fail: plain structs
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeAPIError(w http.ResponseWriter, e *api.Error) {
	status := http.StatusInternalServerError
	if e.Code == api.CodeUnavailable || e.Code == api.CodeNotLeader {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": string(e.Code), "message": e.Message}})
}
