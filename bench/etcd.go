package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// etcdChildEnv, when set to "DIR,CLIENTPORT,PEERPORT", makes this binary
// (the harness or its test binary) run an embedded etcd instead: a process
// of its own, so its CPU time and RSS are measured apart from the clients.
const etcdChildEnv = "LEASEHOLD_BENCH_ETCD"

// runEtcdChild runs the embedded etcd named by etcdChildEnv until SIGTERM.
func runEtcdChild(spec string) error {
	parts := strings.Split(spec, ",")
	if len(parts) != 3 {
		return fmt.Errorf("%s=%q: want DIR,CLIENTPORT,PEERPORT", etcdChildEnv, spec)
	}
	cu, err := url.Parse("http://127.0.0.1:" + parts[1])
	if err != nil {
		return err
	}
	pu, err := url.Parse("http://127.0.0.1:" + parts[2])
	if err != nil {
		return err
	}
	cfg := embed.NewConfig() // durable defaults: WAL fsync'd before every answer
	cfg.Dir = parts[0]
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return err
	case <-time.After(60 * time.Second):
		e.Close()
		return fmt.Errorf("etcd not ready after 60 s")
	}
	select {
	case <-sig:
	case err := <-e.Err():
		e.Close()
		return err
	}
	e.Close()
	return nil
}

// etcd runs an embedded etcd (a child process) and locks with
// client/v3/concurrency: a Session (a lease kept alive) and a Mutex.
type etcd struct {
	endpoint string
	proc     *process
}

func (e *etcd) Name() string   { return "etcd" }
func (e *etcd) Sessions() bool { return true }
func (e *etcd) PID() int       { return e.proc.pid() }
func (e *etcd) Stop() error    { return e.proc.stop() }

func (e *etcd) Start(ctx context.Context, dir string) error {
	cport, err := freePort()
	if err != nil {
		return err
	}
	pport, err := freePort()
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	e.endpoint = "127.0.0.1:" + strconv.Itoa(cport)
	spec := fmt.Sprintf("%s/etcd,%d,%d", dir, cport, pport)
	if e.proc, err = startProcess(self, nil, []string{etcdChildEnv + "=" + spec}); err != nil {
		return err
	}
	err = e.proc.waitReady(ctx, func(ctx context.Context) error {
		c, err := e.Dial(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.(*etcdConn).c.Get(ctx, "ready")
		return err
	})
	if err != nil {
		_ = e.proc.stop()
	}
	return err
}

func (e *etcd) Dial(ctx context.Context) (conn, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{e.endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), Context: context.WithoutCancel(ctx)})
	if err != nil {
		return nil, err
	}
	return &etcdConn{c: c}, nil
}

type etcdConn struct{ c *clientv3.Client }

func (c *etcdConn) Close() error { return c.c.Close() }

// etcdTTL is ttl in whole seconds, at least 1.
func etcdTTL(ttl time.Duration) int { return max(1, int((ttl+time.Second-1)/time.Second)) }

func (c *etcdConn) NewSession(ctx context.Context, ttl time.Duration) (session, error) {
	s, err := concurrency.NewSession(c.c, concurrency.WithTTL(etcdTTL(ttl)), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, err
	}
	return etcdSession{s}, nil
}

// Churn is Grant, KeepAliveOnce, Revoke.
func (c *etcdConn) Churn(ctx context.Context, ttl time.Duration) error {
	g, err := c.c.Grant(ctx, int64(etcdTTL(ttl)))
	if err != nil {
		return err
	}
	if _, err := c.c.KeepAliveOnce(ctx, g.ID); err != nil {
		return err
	}
	_, err = c.c.Revoke(ctx, g.ID)
	return err
}

type etcdSession struct{ s *concurrency.Session }

func (s etcdSession) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	m := concurrency.NewMutex(s.s, "/bench/"+name)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return m.Unlock, nil
}

func (s etcdSession) Alive() bool {
	select {
	case <-s.s.Done():
		return false
	default:
		return true
	}
}

func (s etcdSession) Crash() { s.s.Orphan() }

func (s etcdSession) Close(context.Context) error { return s.s.Close() }
