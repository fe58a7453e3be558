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
// "DIR,CLIENTPORT,PEERPORT,NAME,INITIALCLUSTER" runs member NAME of the
// cluster INITIALCLUSTER ("e1=http://127.0.0.1:PORT,e2=…").
const etcdChildEnv = "LEASEHOLD_BENCH_ETCD"

// runEtcdChild runs the embedded etcd named by etcdChildEnv until SIGTERM.
func runEtcdChild(spec string) error {
	parts := strings.SplitN(spec, ",", 5)
	if len(parts) != 3 && len(parts) != 5 {
		return fmt.Errorf("%s=%q: want DIR,CLIENTPORT,PEERPORT[,NAME,INITIALCLUSTER]", etcdChildEnv, spec)
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
	if len(parts) == 5 {
		// A restart with the member's data keeps its WAL and ignores this.
		cfg.Name, cfg.InitialCluster = parts[3], parts[4]
	}
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

// etcd runs an embedded etcd (a child process per member: one, or a
// cluster of nodes) and locks with client/v3/concurrency: a Session (a
// lease kept alive) and a Mutex.
type etcd struct {
	nodes     int      // 1: a single member
	endpoints []string // every member's client address
	specs     []string // every member's etcdChildEnv, to restart it
	procs     []*process
}

func (e *etcd) Name() string   { return "etcd" }
func (e *etcd) Sessions() bool { return true }
func (e *etcd) PIDs() []int    { return pids(e.procs) }
func (e *etcd) Stop() error    { return stopAll(e.procs) }

func (e *etcd) Start(ctx context.Context, dir string) error {
	n := max(1, e.nodes)
	ports, err := freePorts(2 * n)
	if err != nil {
		return err
	}
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("e%d=http://127.0.0.1:%d", i+1, ports[n+i]))
	}
	e.endpoints, e.specs, e.procs = make([]string, n), make([]string, n), make([]*process, n)
	for i := range n {
		e.endpoints[i] = "127.0.0.1:" + strconv.Itoa(ports[i])
		e.specs[i] = fmt.Sprintf("%s/etcd%d,%d,%d", dir, i+1, ports[i], ports[n+i])
		if n > 1 {
			e.specs[i] += fmt.Sprintf(",e%d,%s", i+1, strings.Join(initial, ","))
		}
		if err := e.startMember(i); err != nil {
			_ = stopAll(e.procs)
			return err
		}
	}
	for i := range n {
		if err := e.waitMember(ctx, i); err != nil {
			_ = stopAll(e.procs)
			return err
		}
	}
	return nil
}

// startMember starts member i's process.
func (e *etcd) startMember(i int) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	e.procs[i], err = startProcess(self, nil, []string{etcdChildEnv + "=" + e.specs[i]})
	return err
}

// waitMember waits until member i serves a linearizable read: it has a
// leader and has applied what the leader committed.
func (e *etcd) waitMember(ctx context.Context, i int) error {
	return e.procs[i].waitReady(ctx, func(ctx context.Context) error {
		c, err := e.dial(ctx, e.endpoints[i:i+1])
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Get(ctx, "ready")
		return err
	})
}

func (e *etcd) Dial(ctx context.Context) (conn, error) {
	c, err := e.dial(ctx, e.endpoints)
	if err != nil {
		return nil, err
	}
	return &etcdConn{c: c}, nil
}

func (e *etcd) dial(ctx context.Context, endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), Context: context.WithoutCancel(ctx)})
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
