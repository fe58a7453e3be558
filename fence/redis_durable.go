package fence

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// CheckRedisDurable returns nil if every server behind rdb (every master of a
// *redis.ClusterClient) has `appendonly yes` and `appendfsync always` and is not a read-only
// replica; otherwise an error wrapping ErrNotDurable that names the setting to change. A server
// that refuses CONFIG GET (renamed or forbidden by an ACL) cannot be verified and is refused
// too. The check reads the configuration at the time of the call: a later CONFIG SET is not
// seen, so re-run it where the configuration can change.
func CheckRedisDurable(ctx context.Context, rdb redis.Cmdable) error {
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
			return fmt.Errorf("%w: cannot read %s (CONFIG GET: %v); the fence's durability cannot be verified", ErrNotDurable, name, err)
		}
		cfg[name] = strings.ToLower(m[name])
	}
	if cfg["appendonly"] != "yes" {
		return fmt.Errorf("%w: appendonly is %q: a restart reloads an older snapshot and rolls the fence back (set appendonly yes and appendfsync always)", ErrNotDurable, cfg["appendonly"])
	}
	if cfg["appendfsync"] != "always" {
		return fmt.Errorf("%w: appendfsync is %q: a crash loses the last acknowledged writes and rolls the fence back (set appendfsync always)", ErrNotDurable, cfg["appendfsync"])
	}
	info, err := rdb.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("fence: redis durability check: INFO replication: %w", err)
	}
	for line := range strings.Lines(info) {
		if strings.TrimSpace(line) == "role:slave" {
			return fmt.Errorf("%w: the server is a replica; point the guard at the primary", ErrNotDurable)
		}
	}
	return nil
}

// NewRedisDurable is NewRedis after CheckRedisDurable: it refuses (an error wrapping
// ErrNotDurable) a server whose persistence cannot keep the fence across a restart.
func NewRedisDurable(ctx context.Context, rdb redis.Cmdable, opts ...Option) (*Redis, error) {
	if err := CheckRedisDurable(ctx, rdb); err != nil {
		return nil, err
	}
	return NewRedis(rdb, opts...), nil
}
