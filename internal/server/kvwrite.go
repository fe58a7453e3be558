package server

import (
	"errors"

	"github.com/leasehold/leasehold/internal/fsm"
)

// kvWrite is the outcome of one applied fenced KV write, as the metrics
// and the dashboard's event feed show it. The state machine records no
// event for a refused write (a refusal changes nothing); every node
// derives this from the applied result instead.
type kvWrite struct {
	// Result is "accepted", "stale-token", "invalid-token" or "too-many-keys".
	Result    string
	Key       string // empty for invalid-token and too-many-keys
	Token     uint64
	LastToken uint64 // the token the key holds (stale-token only)
}

// kvWriteOf reports the KV write res is the result of, if any.
func kvWriteOf(res *fsm.Result) (kvWrite, bool) {
	var stale *fsm.StaleTokenError
	switch {
	case res.KV != nil && res.Err == nil:
		return kvWrite{Result: "accepted", Key: res.KV.GetKey(), Token: res.KV.GetToken()}, true
	case errors.As(res.Err, &stale):
		return kvWrite{Result: "stale-token", Key: stale.Key, Token: stale.Token, LastToken: stale.LastToken}, true
	case errors.Is(res.Err, fsm.ErrInvalidToken):
		return kvWrite{Result: "invalid-token"}, true
	case errors.Is(res.Err, fsm.ErrTooManyKeys):
		return kvWrite{Result: "too-many-keys"}, true
	}
	return kvWrite{}, false
}
