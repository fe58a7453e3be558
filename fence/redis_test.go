package fence_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/redisfence"
)

func openRedisClient(t *testing.T) *redis.Client {
	t.Helper()
	url := serviceURL(t, "LEASEHOLD_TEST_REDIS")
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("LEASEHOLD_TEST_REDIS: %v", err)
	}
	opt.PoolSize = 16
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("redis at LEASEHOLD_TEST_REDIS: %v (start it with: eval \"$(bash scripts/ci-services.sh)\")", err)
	}
	return rdb
}

// cleanupPrefix deletes every key under prefix when the test ends.
func cleanupPrefix(t *testing.T, rdb *redis.Client, prefix string) {
	t.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("cleanup %s*: %v", prefix, err)
		}
	})
}

// loggedEffect appends the token to a log list and sets a data key; ARGV[3] == "fail" makes
// it fail before writing anything.
var loggedEffectBody = `
if ARGV[3] == 'fail' then return redis.error_reply('effect failed') end
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
return 'ok'
`

func openRedis(t *testing.T, mode fence.Mode) *subject {
	rdb := openRedisClient(t)
	prefix := unique("leasehold-test:") + ":"
	cleanupPrefix(t, rdb, prefix)
	g := redisfence.New(rdb, fence.WithMode(mode), fence.WithKeyPrefix(prefix+"fence:"))
	eff := redisfence.NewEffect(loggedEffectBody)
	return &subject{
		guard: g,
		doLogged: func(ctx context.Context, key string, token uint64, value []byte, fail bool) error {
			flag := ""
			if fail {
				flag = "fail"
			}
			res, err := g.Do(ctx, key, token, eff, []string{prefix + "log:" + key, prefix + "data:" + key},
				strconv.FormatUint(token, 10), value, flag)
			if err == nil && res != "ok" {
				t.Errorf("effect result = %#v, want \"ok\"", res)
			}
			return err
		},
		logged: func(ctx context.Context, key string) ([]uint64, []byte) {
			strs, err := rdb.LRange(ctx, prefix+"log:"+key, 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			log := make([]uint64, len(strs))
			for i, s := range strs {
				log[i], _ = strconv.ParseUint(s, 10, 64)
			}
			v, err := rdb.Get(ctx, prefix+"data:"+key).Bytes()
			if err != nil && err != redis.Nil {
				t.Fatal(err)
			}
			return log, v
		},
	}
}

func TestRedisTokenRange(t *testing.T) {
	t.Parallel()
	rdb := openRedisClient(t)
	prefix := unique("leasehold-test:") + ":"
	cleanupPrefix(t, rdb, prefix)
	testTokenRange(context.Background(), t, redisfence.New(rdb, fence.WithKeyPrefix(prefix)))
}

// TestRedisCompareEdges pins the Lua comparison at the edges where doubles lose precision:
// 2^53 and 2^53+1 are the same double, so a tonumber comparison would accept 2^53 after
// 2^53+1.
func TestRedisCompareEdges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := openRedisClient(t)
	prefix := unique("leasehold-test:") + ":"
	cleanupPrefix(t, rdb, prefix)
	g := redisfence.New(rdb, fence.WithKeyPrefix(prefix), fence.WithMode(fence.Strict))
	tests := []struct {
		last, token uint64
		accept      bool
	}{
		{1<<53 + 1, 1 << 53, false},
		{1 << 53, 1<<53 + 1, true},
		{1<<53 + 1, 1<<53 + 1, false}, // strict: equal refused
		{9999999999, 10000000000, true},
		{10000000000, 9999999999, false},
		{12345678901234567890, 12345678911234567890, true},  // differ in the high half only
		{12345678911234567890, 12345678901234567890, false}, // ... and back
		{18446744073709551614, 18446744073709551615, true},
		{18446744073709551615, 18446744073709551614, false},
	}
	for i, tt := range tests {
		key := "edge" + strconv.Itoa(i)
		if err := g.Write(ctx, key, tt.last, []byte("last")); err != nil {
			t.Fatal(err)
		}
		err := g.Write(ctx, key, tt.token, []byte("new"))
		if tt.accept {
			if err != nil {
				t.Errorf("last %d, token %d: %v; want accepted", tt.last, tt.token, err)
			}
			mustLast(t, g, key, tt.token, "new")
		} else {
			mustStale(t, err, key, tt.token, tt.last)
			mustLast(t, g, key, tt.last, "last")
		}
	}
}

// TestRedisEffectErrorKeepsToken: Redis does not roll back, so a body that wrote and then
// failed leaves its write, but the token is not recorded.
func TestRedisEffectErrorKeepsToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := openRedisClient(t)
	prefix := unique("leasehold-test:") + ":"
	cleanupPrefix(t, rdb, prefix)
	g := redisfence.New(rdb, fence.WithKeyPrefix(prefix), fence.WithMode(fence.Strict))
	eff := redisfence.NewEffect(`redis.call('SET', KEYS[1], 'half'); redis.call('INCR', KEYS[1])`)
	if _, err := g.Do(ctx, "k", 3, eff, []string{prefix + "data"}); err == nil {
		t.Fatal("INCR of a non-integer succeeded")
	}
	mustLast(t, g, "k", 0, "")
	if v := rdb.Get(ctx, prefix+"data").Val(); v != "half" {
		t.Fatalf("data = %q, want the partial write \"half\"", v)
	}
	// Without an error the same token goes through and returns the body's value.
	ok := redisfence.NewEffect(`return redis.call('INCRBY', KEYS[1], ARGV[1])`)
	res, err := g.Do(ctx, "k", 3, ok, []string{prefix + "n"}, 5)
	if err != nil || res != int64(5) {
		t.Fatalf("Do = %#v, %v; want 5", res, err)
	}
	mustLast(t, g, "k", 3, "")
}

// TestRedisDurable: the checked constructor refuses the test server with Redis's default
// persistence, and accepts it once AOF with appendfsync always is on (restored afterwards).
func TestRedisDurable(t *testing.T) {
	ctx := context.Background()
	rdb := openRedisClient(t)
	orig := map[string]string{}
	for _, name := range []string{"appendonly", "appendfsync"} {
		m, err := rdb.ConfigGet(ctx, name).Result()
		if err != nil {
			t.Fatalf("CONFIG GET %s: %v", name, err)
		}
		orig[name] = m[name]
	}
	t.Cleanup(func() {
		for _, name := range []string{"appendfsync", "appendonly"} {
			if err := rdb.ConfigSet(ctx, name, orig[name]).Err(); err != nil {
				t.Errorf("restore %s %s: %v", name, orig[name], err)
			}
		}
	})
	set := func(name, value string) {
		t.Helper()
		if err := rdb.ConfigSet(ctx, name, value).Err(); err != nil {
			t.Fatalf("CONFIG SET %s %s: %v", name, value, err)
		}
	}

	set("appendonly", "no")
	g, err := redisfence.NewDurable(ctx, rdb)
	if !errors.Is(err, fence.ErrNotDurable) || g != nil || !strings.Contains(err.Error(), "appendonly") {
		t.Fatalf("appendonly no: %v, want ErrNotDurable naming appendonly", err)
	}
	set("appendonly", "yes")
	set("appendfsync", "everysec")
	if _, err := redisfence.NewDurable(ctx, rdb); !errors.Is(err, fence.ErrNotDurable) || !strings.Contains(err.Error(), "appendfsync") {
		t.Fatalf("appendfsync everysec: %v, want ErrNotDurable naming appendfsync", err)
	}
	set("appendfsync", "always")
	prefix := unique("leasehold-test:") + ":"
	cleanupPrefix(t, rdb, prefix)
	g, err = redisfence.NewDurable(ctx, rdb, fence.WithKeyPrefix(prefix))
	if err != nil {
		t.Fatalf("appendonly yes, appendfsync always: %v", err)
	}
	if err := g.Write(ctx, "k", 2, []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := g.Write(ctx, "k", 1, []byte("old")); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("stale write through the checked guard: %v", err)
	}
}

// TestRedisWait: with WithRedisWait an accepted write that not enough replicas acknowledged
// fails with ErrNotDurable (the test server has no replica), although it was applied on the
// primary; a refused write is not waited for.
func TestRedisWait(t *testing.T) {
	ctx := context.Background()
	rdb := openRedisClient(t)
	prefix := unique("leasehold-test:") + ":"
	cleanupPrefix(t, rdb, prefix)
	g := redisfence.New(rdb, fence.WithKeyPrefix(prefix), fence.WithRedisWait(1, 50*time.Millisecond))
	if err := g.Write(ctx, "k", 5, []byte("v")); !errors.Is(err, fence.ErrNotDurable) || !strings.Contains(err.Error(), "0 of 1 replicas") {
		t.Fatalf("write without a replica: %v, want ErrNotDurable", err)
	}
	if tok, _, err := g.Last(ctx, "k"); err != nil || tok != 5 {
		t.Fatalf("Last = %d, %v; want 5 (applied on the primary)", tok, err)
	}
	if err := g.Write(ctx, "k", 4, []byte("old")); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("stale write: %v, want ErrStaleToken", err)
	}
	if err := redisfence.New(rdb, fence.WithKeyPrefix(prefix), fence.WithRedisWait(0, 0)).Write(ctx, "k", 6, nil); err != nil {
		t.Fatalf("WAIT 0: %v", err)
	}
}
