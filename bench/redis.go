package main

import (
	"context"
	"path/filepath"
	"strconv"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
)

// redisSystem runs redis-server with every write fsync'd before the answer
// (appendonly, appendfsync always) and locks with go-redsync: a key with
// an expiry, no sessions, waiters polling with redsync's default delays.
type redisSystem struct {
	bin  string // redis-server
	addr string
	proc *process
}

func (r *redisSystem) Name() string   { return "redis" }
func (r *redisSystem) Sessions() bool { return false }
func (r *redisSystem) PIDs() []int    { return []int{r.proc.pid()} }
func (r *redisSystem) Stop() error    { return r.proc.stop() }

func (r *redisSystem) Start(ctx context.Context, dir string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	r.addr = "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no",
		"--logfile", filepath.Join(dir, "redis.log")}
	if r.proc, err = startProcess(r.bin, args, nil); err != nil {
		return err
	}
	err = r.proc.waitReady(ctx, func(ctx context.Context) error {
		c := goredislib.NewClient(&goredislib.Options{Addr: r.addr})
		defer c.Close()
		return c.Ping(ctx).Err()
	})
	if err != nil {
		_ = r.proc.stop()
	}
	return err
}

func (r *redisSystem) Dial(context.Context) (conn, error) {
	c := goredislib.NewClient(&goredislib.Options{Addr: r.addr, PoolSize: 128})
	return &redisConn{c: c, rs: redsync.New(goredis.NewPool(c))}, nil
}

type redisConn struct {
	c  *goredislib.Client
	rs *redsync.Redsync
}

func (c *redisConn) Close() error { return c.c.Close() }

// NewSession returns a lock factory whose locks expire after ttl.
func (c *redisConn) NewSession(_ context.Context, ttl time.Duration) (session, error) {
	return &redisSession{rs: c.rs, ttl: ttl}, nil
}

func (c *redisConn) Churn(context.Context, time.Duration) error { return errNoSessions }

type redisSession struct {
	rs  *redsync.Redsync
	ttl time.Duration
}

func (s *redisSession) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	// Tries are bounded by ctx, not by count.
	m := s.rs.NewMutex("bench/"+name, redsync.WithExpiry(s.ttl), redsync.WithTries(1<<30))
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		_, err := m.UnlockContext(ctx)
		return err
	}, nil
}

func (s *redisSession) Alive() bool                 { return true }
func (s *redisSession) Crash()                      {}
func (s *redisSession) Close(context.Context) error { return nil }
