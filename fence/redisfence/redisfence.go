package redisfence

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/fence"
)

// redisCompare compares two canonical decimal uint64 strings exactly. Lua numbers are doubles,
// exact only below 2^53, so a token is never converted whole: a longer string is the larger
// number, and strings of equal length are compared as two parts of at most 10 digits each
// (< 10^10 < 2^53), high part first. String comparison (<) is not used because Lua compares
// strings with strcoll and Redis sets LC_COLLATE from its environment.
const redisCompare = `
local function fence_cmp(a, b)
  if #a ~= #b then
    if #a < #b then return -1 end
    return 1
  end
  local s = 0
  if #a > 10 then s = #a - 10 end
  local ah, bh = tonumber(string.sub(a, 1, s)) or 0, tonumber(string.sub(b, 1, s)) or 0
  if ah ~= bh then
    if ah < bh then return -1 end
    return 1
  end
  local al, bl = tonumber(string.sub(a, s + 1)), tonumber(string.sub(b, s + 1))
  if al ~= bl then
    if al < bl then return -1 end
    return 1
  end
  return 0
end
local fence_last = redis.call('HGET', KEYS[1], 'token')
if fence_last then
  local c = fence_cmp(ARGV[1], fence_last)
  if c < 0 or (c == 0 and ARGV[2] == 'strict') then
    return {0, fence_last}
  end
end
`

// redisWriteScript is the script of Redis.Write.
const redisWriteScript = `-- leasehold fence: write
-- KEYS[1] fence hash; ARGV[1] token (canonical decimal); ARGV[2] 'strict' or 'monotonic'; ARGV[3] value
` + redisCompare + `
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[3])
return {1, ARGV[1]}
`

// Redis is a Guard over Redis (go-redis v9). Key k's last token and value live in the hash
// <prefix>k, fields "token" (canonical decimal) and "value". Write is one Lua script (run with
// EVALSHA, falling back to EVAL):
//
//	local fence_last = redis.call('HGET', KEYS[1], 'token')
//	if fence_last then
//	  local c = fence_cmp(ARGV[1], fence_last)       -- exact uint64 comparison, see below
//	  if c < 0 or (c == 0 and ARGV[2] == 'strict') then return {0, fence_last} end
//	end
//	redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[3])
//	return {1, ARGV[1]}
//
// Why it is atomic: Redis runs a script to completion with no other command in between, so the
// HGET, the comparison and the HSET see no concurrent writer. Tokens are compared exactly over
// the whole uint64 range: Lua numbers are doubles (exact below 2^53 only), so fence_cmp orders
// by length first and then compares two halves of at most 10 digits each.
//
// The general form Do appends YOUR script body after the check, in the same script, so your
// writes happen iff the token is accepted. In Redis Cluster, every key a script touches must
// hash to one slot: give the fence prefix and your keys the same hash tag (WithKeyPrefix
// ("{orders}:fence:") with keys "{orders}:..."). Redis does not roll back a script: see Do.
//
// Durability: the guard is only as durable as the Redis server. A key's fence must never go
// back to an older token once a newer one was acknowledged, or a stale holder is admitted
// again. Two things roll it back:
//
//   - A restart without an fsync'd append-only file. With RDB snapshots only (Redis's
//     default), or AOF with appendfsync everysec (AOF's default), a crash loses the last
//     acknowledged writes — back to the last snapshot, or about one second. Run the fence on a
//     server with "appendonly yes" and "appendfsync always".
//   - A failover to a replica that had not received the write. Redis replication is
//     asynchronous: a Sentinel or Cluster failover can promote a replica that is behind.
//     Run the fence's server without automatic failover, or accept that a failover can
//     re-admit a stale token; WAIT after a write (WithRedisWait) narrows the window but
//     Redis does not promise that a WAITed write survives a failover.
//
// NewDurable (or CheckDurable) refuses a server whose configuration cannot keep the
// fence across a restart. Where a stale write costs money, prefer the PostgreSQL guard on a
// synchronously replicated database.
type Guard struct {
	rdb         redis.Cmdable
	mode        fence.Mode
	prefix      string
	write       *redis.Script
	waitN       int // see WithRedisWait
	waitTimeout time.Duration
}

var _ fence.Guard = (*Guard)(nil)

// New returns a guard over rdb (a *redis.Client, *redis.ClusterClient or *redis.Ring).
// WithMode, WithKeyPrefix and WithRedisWait apply.
func New(rdb redis.Cmdable, opts ...fence.Option) *Guard {
	o := fence.Apply(opts...)
	return &Guard{rdb: rdb, mode: o.Mode, prefix: o.KeyPrefix, write: redis.NewScript(redisWriteScript),
		waitN: o.WaitReplicas, waitTimeout: o.WaitTimeout}
}

// FenceKey returns the name of key's fence hash.
func (r *Guard) FenceKey(key string) string { return r.prefix + key }

func (r *Guard) modeArg() string {
	if r.mode == fence.Strict {
		return "strict"
	}
	return "monotonic"
}

// Write implements Guard.
func (r *Guard) Write(ctx context.Context, key string, token uint64, value []byte) error {
	if err := fence.ValidateWrite(key, token); err != nil {
		return err
	}
	res, err := r.run(ctx, r.write, []string{r.FenceKey(key)}, strconv.FormatUint(token, 10), r.modeArg(), value)
	if err != nil {
		return fmt.Errorf("fence: redis write %q: %w", key, err)
	}
	_, err = r.result(key, token, res)
	return err
}

// result decodes {1, token, result?} (accepted) or {0, last} (stale).
func (r *Guard) result(key string, token uint64, res []any) (any, error) {
	if len(res) < 2 {
		return nil, fmt.Errorf("fence: redis: unexpected script reply %v", res)
	}
	ok, _ := res[0].(int64)
	if ok == 1 {
		if len(res) > 2 {
			return res[2], nil
		}
		return nil, nil
	}
	s, _ := res[1].(string)
	last, err := fence.ParseStoredToken(s)
	if err != nil {
		return nil, err
	}
	return nil, &fence.StaleTokenError{Key: key, Token: token, LastToken: last}
}

// Last implements Guard.
func (r *Guard) Last(ctx context.Context, key string) (uint64, []byte, error) {
	if err := fence.ValidateKey(key); err != nil {
		return 0, nil, err
	}
	vals, err := r.rdb.HMGet(ctx, r.FenceKey(key), "token", "value").Result()
	if err != nil {
		return 0, nil, fmt.Errorf("fence: redis last %q: %w", key, err)
	}
	tok, _ := vals[0].(string)
	if tok == "" {
		return 0, nil, nil
	}
	t, err := fence.ParseStoredToken(tok)
	if err != nil {
		return 0, nil, err
	}
	var value []byte
	if v, ok := vals[1].(string); ok {
		value = []byte(v)
	}
	return t, value, nil
}

// RedisEffect is a Lua script body run by Redis.Do after the token check, in the same script.
// Create it once and reuse it (the script is loaded by SHA).
type Effect struct {
	script *redis.Script
}

// NewEffect wraps body, a Lua chunk, into a fenced script. Inside body, KEYS and ARGV are
// YOUR keys and args as passed to Do (KEYS[1] is your first key, not the fence key); its return
// value is Do's result. body must not touch the fence hash.
func NewEffect(body string) *Effect {
	src := `-- leasehold fence: general form
-- KEYS[1] fence hash, KEYS[2..] caller keys; ARGV[1] token; ARGV[2] mode; ARGV[3..] caller args
` + redisCompare + `
local fence_keys, fence_argv = {}, {}
for i = 2, #KEYS do fence_keys[i - 1] = KEYS[i] end
for i = 3, #ARGV do fence_argv[i - 2] = ARGV[i] end
local function fence_body(KEYS, ARGV)
` + body + `
end
local ok, res = pcall(fence_body, fence_keys, fence_argv)
if not ok then
  if type(res) == 'table' and res.err then return res end
  return redis.error_reply('fence effect: ' .. tostring(res))
end
if type(res) == 'table' and res.err then return res end
redis.call('HSET', KEYS[1], 'token', ARGV[1])
return {1, ARGV[1], res}
`
	return &Effect{script: redis.NewScript(src)}
}

// Do runs eff with keys and args iff token is not stale for key, and records token as key's
// last token iff eff's body finished without an error; the stored value is left as it is. It
// returns the body's return value as go-redis decodes it (nil for no value). If the token is
// stale, Do returns a *StaleTokenError and the body does not run.
//
// Redis never rolls a script back: if the body fails halfway (a redis.call error or a
// redis.error_reply it returns), its earlier writes stay, the token is NOT recorded, and Do
// returns the error. Write bodies that check first and write last.
func (r *Guard) Do(ctx context.Context, key string, token uint64, eff *Effect, keys []string, args ...any) (any, error) {
	if err := fence.ValidateWrite(key, token); err != nil {
		return nil, err
	}
	allKeys := append([]string{r.FenceKey(key)}, keys...)
	allArgs := append([]any{strconv.FormatUint(token, 10), r.modeArg()}, args...)
	res, err := r.run(ctx, eff.script, allKeys, allArgs...)
	if err != nil {
		return nil, fmt.Errorf("fence: redis do %q: %w", key, err)
	}
	return r.result(key, token, res)
}
