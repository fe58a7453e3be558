package redisfence

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/fence"
)

// CheckDurable returns nil if every server behind rdb (every master of a
// *redis.ClusterClient) has `appendonly yes` and `appendfsync always` and is not a read-only
// replica; otherwise an error wrapping fence.ErrNotDurable that names the setting to change. A server
// that refuses CONFIG GET (renamed or forbidden by an ACL) cannot be verified and is refused
// too. The check reads the configuration at the time of the call: a later CONFIG SET is not
// seen, so re-run it where the configuration can change.
func CheckDurable(ctx context.Context, rdb redis.Cmdable) error {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return checkRedisNode(ctx, c)
		})
	}
	return checkRedisNode(ctx, rdb)
}

func checkRedisNode(ctx context.Context, rdb redis.Cmdable) error {
	cfg := map[string]string{}
	for _, name := range []string{"appendonly", "appendfsync"} {
		m, err := rdb.ConfigGet(ctx, name).Result()
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("fence: redis durability check: %w", err)
			}
			return fmt.Errorf("%w: cannot read %s (CONFIG GET: %v); the fence's durability cannot be verified", fence.ErrNotDurable, name, err)
		}
		cfg[name] = strings.ToLower(m[name])
	}
	if cfg["appendonly"] != "yes" {
		return fmt.Errorf("%w: appendonly is %q: a restart reloads an older snapshot and rolls the fence back (set appendonly yes and appendfsync always)", fence.ErrNotDurable, cfg["appendonly"])
	}
	if cfg["appendfsync"] != "always" {
		return fmt.Errorf("%w: appendfsync is %q: a crash loses the last acknowledged writes and rolls the fence back (set appendfsync always)", fence.ErrNotDurable, cfg["appendfsync"])
	}
	info, err := rdb.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("fence: redis durability check: INFO replication: %w", err)
	}
	for line := range strings.Lines(info) {
		if strings.TrimSpace(line) == "role:slave" {
			return fmt.Errorf("%w: the server is a replica; point the guard at the primary", fence.ErrNotDurable)
		}
	}
	return nil
}

// NewDurable is New after CheckDurable: it refuses (an error wrapping
// fence.ErrNotDurable) a server whose persistence cannot keep the fence across a restart.
func NewDurable(ctx context.Context, rdb redis.Cmdable, opts ...fence.Option) (*Guard, error) {
	if err := CheckDurable(ctx, rdb); err != nil {
		return nil, err
	}
	return New(rdb, opts...), nil
}

// run runs script; with WithRedisWait, on one connection followed by WAIT when the script
// accepted the token (its reply starts with 1).
func (r *Guard) run(ctx context.Context, script *redis.Script, keys []string, args ...any) ([]any, error) {
	if r.waitN <= 0 {
		return script.Run(ctx, r.rdb, keys, args...).Slice()
	}
	c, ok := r.rdb.(*redis.Client)
	if !ok {
		return nil, fmt.Errorf("%w: WithRedisWait needs a *redis.Client, not %T (WAIT counts one connection's writes)", fence.ErrNotDurable, r.rdb)
	}
	conn := c.Conn()
	defer conn.Close()
	res, err := script.Run(ctx, conn, keys, args...).Slice()
	if err != nil || len(res) == 0 || res[0] != int64(1) {
		return res, err
	}
	n, err := conn.Wait(ctx, r.waitN, r.waitTimeout).Result()
	if err != nil {
		return nil, fmt.Errorf("fence: redis WAIT after an accepted write (applied on the primary): %w", err)
	}
	if int(n) < r.waitN {
		return nil, fmt.Errorf("%w: write applied on the primary but acknowledged by %d of %d replicas within %v", fence.ErrNotDurable, n, r.waitN, r.waitTimeout)
	}
	return res, nil
}
