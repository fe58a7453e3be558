package metrics

import (
	"errors"

	"github.com/leasehold/leasehold/internal/fsm"
)

// KVWrite is the outcome of one applied fenced KV write, as the metrics
// and the dashboard's event feed show it. The state machine records no
// event for a refused write (a refusal changes nothing); every node
// derives this from the applied result instead.
type KVWrite struct {
	// Result is "accepted", "stale-token", "invalid-token" or "too-many-keys".
	Result    string
	Key       string // empty for invalid-token and too-many-keys
	Token     uint64
	LastToken uint64 // the token the key holds (stale-token only)
}

// KVWriteOf reports the KV write res is the result of, if any.
func KVWriteOf(res *fsm.Result) (KVWrite, bool) {
	var stale *fsm.StaleTokenError
	switch {
	case res.KV != nil && res.Err == nil:
		return KVWrite{Result: "accepted", Key: res.KV.GetKey(), Token: res.KV.GetToken()}, true
	case errors.As(res.Err, &stale):
		return KVWrite{Result: "stale-token", Key: stale.Key, Token: stale.Token, LastToken: stale.LastToken}, true
	case errors.Is(res.Err, fsm.ErrInvalidToken):
		return KVWrite{Result: "invalid-token"}, true
	case errors.Is(res.Err, fsm.ErrTooManyKeys):
		return KVWrite{Result: "too-many-keys"}, true
	}
	return KVWrite{}, false
}
