package e2e

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/client"
)

// The fenced KV as a porcupine model: per key, the last accepted token and
// its value. A put is accepted iff its token ≥ the last; a put whose outcome
// is unknown may take effect at any point after it was sent (porcupine may
// place it last, where nothing observes it).
type kvInput struct {
	put   bool
	key   string
	token uint64
	value string
}

type kvOutput struct {
	result string // put: accepted, stale, none (not applied), unknown; get: found, missing
	token  uint64
	value  string
}

type kvState struct {
	token uint64
	value string
}

var kvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(kvInput).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return kvState{} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(kvState), input.(kvInput), output.(kvOutput)
		if !in.put {
			if out.result == "missing" {
				return st.token == 0, st
			}
			return out.token == st.token && out.value == st.value, st
		}
		allowed := in.token >= st.token
		next := kvState{token: in.token, value: in.value}
		switch out.result {
		case "accepted":
			return allowed, next
		case "stale":
			return !allowed, st
		case "none":
			return true, st
		default: // unknown
			if allowed {
				return true, next
			}
			return true, st
		}
	},
	Equal: func(a, b any) bool { return a.(kvState) == b.(kvState) },
}

// recordPut appends a fenced write to the history.
func (h *history) recordPut(key string, token uint64, value string, call time.Time, err error) {
	out := kvOutput{result: "accepted"}
	ret := time.Now().UnixNano()
	switch code := api.CodeOf(err); {
	case err == nil:
	case code == api.CodeStaleToken:
		out.result = "stale"
	case code == api.CodeUnavailable || code == api.CodeNotLeader || code == api.CodeInvalidArgument:
		out.result = "none"
	default:
		out.result, ret = "unknown", math.MaxInt64
	}
	h.mu.Lock()
	h.kvOps = append(h.kvOps, porcupine.Operation{Input: kvInput{put: true, key: key, token: token, value: value}, Call: call.UnixNano(), Output: out, Return: ret})
	h.mu.Unlock()
}

// reader reads the keys with linearizable KVGets until ctx ends.
func reader(ctx context.Context, eps string, keys []string, h *history) {
	c, err := client.Dial(ctx, eps)
	if err != nil {
		return
	}
	defer c.Close()
	for i := 0; ctx.Err() == nil; i++ {
		key := keys[i%len(keys)]
		call := time.Now()
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		v, tok, err := c.KVGet(rctx, key)
		cancel()
		out := kvOutput{result: "found", token: tok, value: string(v)}
		switch {
		case errors.Is(err, client.ErrNotFound):
			out = kvOutput{result: "missing"}
		case err != nil:
			continue // a failed read observed nothing
		}
		h.mu.Lock()
		h.kvOps = append(h.kvOps, porcupine.Operation{Input: kvInput{key: key}, Call: call.UnixNano(), Output: out, Return: time.Now().UnixNano()})
		h.mu.Unlock()
	}
}
