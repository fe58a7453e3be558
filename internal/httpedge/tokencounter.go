package httpedge

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"

	"github.com/leasehold/leasehold/api"
)

// TokenCounterPath is the HTTP endpoint that answers the newest token the cluster has issued,
// as {"token": N}. A resource that cannot verify signed sequencers (the gateway's
// --token-counter) uses it to refuse tokens the cluster never issued. The read is
// linearizable: the leader confirms its leadership and waits for every committed entry, so
// every token granted before the request was sent is at most N. A follower fetches the answer
// from the leader. Errors are {"error": {"code", "message"}} with 503 (unavailable,
// not-leader) or 500.
const TokenCounterPath = "/v1/token-counter"

// ForwardedHeader marks a request a follower forwarded, with the
// follower's id; the receiver does not forward it again, so a request
// never loops between nodes.
const ForwardedHeader = "Leasehold-Forwarded-By"

// TokenNode is what the token counter asks of the node. Its methods are
// called concurrently, one request each.
type TokenNode interface {
	// ID names this node.
	ID() string
	// LeaderToken returns the newest token issued when this node leads,
	// after a read index confirmed that it does and the entries committed
	// before are applied. led is false when this node does not lead, or
	// lost the leadership during the read: the request then goes to the
	// leader. Any other failure is err, answered with its api code.
	LeaderToken(ctx context.Context) (token uint64, led bool, err error)
	// LeaderURL returns the base URL of the leader's API, or an error
	// with its api code (unavailable when no leader is known).
	LeaderURL() (string, error)
}

// tokenCounterBody is the endpoint's answer.
type tokenCounterBody struct {
	Token uint64 `json:"token"`
}

// TokenCounter serves TokenCounterPath: from node when it leads, else from
// the leader, asked with hc.
func TokenCounter(node TokenNode, hc *http.Client) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		n, led, err := node.LeaderToken(ctx)
		if err != nil {
			WriteAPIError(w, api.FromError(err))
			return
		}
		if led {
			WriteJSON(w, http.StatusOK, tokenCounterBody{Token: n})
			return
		}
		if by := r.Header.Get(ForwardedHeader); by != "" {
			WriteAPIError(w, api.Errorf(api.CodeNotLeader, "node %s is not the leader (request forwarded by %s)", node.ID(), by))
			return
		}
		base, err := node.LeaderURL()
		if err != nil {
			WriteAPIError(w, api.FromError(err))
			return
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+TokenCounterPath, nil)
		if err != nil {
			WriteAPIError(w, api.Errorf(api.CodeInternal, "%v", err))
			return
		}
		req.Header.Set(ForwardedHeader, node.ID())
		resp, err := hc.Do(req)
		if err != nil {
			WriteAPIError(w, api.Errorf(api.CodeUnavailable, "asking the leader: %v", err))
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if err != nil {
			WriteAPIError(w, api.Errorf(api.CodeUnavailable, "reading the leader's answer: %v", err))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(body)
	}
}

// WriteJSON answers v as JSON (plain structs and maps only) with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v) // cannot fail: plain structs
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// WriteAPIError answers e as {"error": {"code", "message"}}: 503 for
// unavailable and not-leader, 500 for anything else.
func WriteAPIError(w http.ResponseWriter, e *api.Error) {
	status := http.StatusInternalServerError
	if e.Code == api.CodeUnavailable || e.Code == api.CodeNotLeader {
		status = http.StatusServiceUnavailable
	}
	WriteJSON(w, status, map[string]any{"error": map[string]string{"code": string(e.Code), "message": e.Message}})
}
