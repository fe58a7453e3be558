package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/client"
)

// leasehold runs `leasehold serve` with its durable defaults: one node,
// or a cluster of nodes (each its own process and data dir, bootstrapped
// together as docs/operating/cluster.md does).
type leasehold struct {
	name  string // "leasehold", or "leasehold@REV" for a build of REV
	bin   string // the built leasehold binary
	pprof bool   // serve --pprof
	// sessions the workloads hold at once; above the server's default
	// sessions-per-principal (every harness session is one principal) the
	// limit is raised to it
	sessions int
	nodes    int      // 1: a single node without a Raft port
	addr     string   // node 0's API address
	addrs    []string // every node's API address
	args     [][]string
	procs    []*process
}

const (
	defaultSessionsPerPrincipal = 10000 // serve's --limit sessions-per-principal default
	churnSessionsMargin         = 1000  // sessions other workloads may leave to expire
)

// buildLeasehold builds cmd/leasehold from the source tree src into dir.
func buildLeasehold(ctx context.Context, src, dir string) (string, error) {
	bin := filepath.Join(dir, "leasehold")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/leasehold")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build leasehold: %v: %s", err, out)
	}
	return bin, nil
}

func (l *leasehold) Name() string { return l.name }

// buildLeaseholdAt builds cmd/leasehold as of git revision rev of the
// repository at src, from a copy of that revision in dir.
func buildLeaseholdAt(ctx context.Context, src, rev, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	archive := exec.CommandContext(ctx, "git", "archive", "--format=tar", rev)
	archive.Dir = src
	tarball, err := archive.Output()
	if err != nil {
		return "", fmt.Errorf("git archive %s: %w", rev, err)
	}
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", dir)
	untar.Stdin = bytes.NewReader(tarball)
	if out, err := untar.CombinedOutput(); err != nil {
		return "", fmt.Errorf("untar %s: %v: %s", rev, err, out)
	}
	return buildLeasehold(ctx, dir, dir)
}

func (l *leasehold) Sessions() bool { return true }
func (l *leasehold) PIDs() []int    { return pids(l.procs) }
func (l *leasehold) Stop() error    { return stopAll(l.procs) }

func (l *leasehold) Start(ctx context.Context, dir string) error {
	n := max(1, l.nodes)
	ports, err := freePorts(2 * n)
	if err != nil {
		return err
	}
	l.addrs, l.args, l.procs = make([]string, n), make([][]string, n), make([]*process, n)
	var boot []string
	for i := range n {
		l.addrs[i] = "127.0.0.1:" + strconv.Itoa(ports[i])
		boot = append(boot, fmt.Sprintf("n%d=127.0.0.1:%d", i+1, ports[n+i]))
	}
	l.addr = l.addrs[0]
	for i := range n {
		args := []string{"serve", "--data", filepath.Join(dir, fmt.Sprintf("data%d", i+1)), "--listen", l.addrs[i], "--log-level", "warn"}
		if n > 1 {
			args = append(args, "--node-id", fmt.Sprintf("n%d", i+1), "--raft-addr", fmt.Sprintf("127.0.0.1:%d", ports[n+i]), "--bootstrap", strings.Join(boot, ","))
		}
		if l.pprof {
			args = append(args, "--pprof")
		}
		if l.sessions > defaultSessionsPerPrincipal {
			args = append(args, "--limit", "sessions-per-principal="+strconv.Itoa(l.sessions+churnSessionsMargin))
		}
		l.args[i] = args
		if l.procs[i], err = startProcess(l.bin, args, nil); err != nil {
			_ = stopAll(l.procs)
			return err
		}
	}
	for i := range n {
		if err := l.waitNode(ctx, i); err != nil {
			_ = stopAll(l.procs)
			return err
		}
	}
	if n > 1 {
		if err := l.waitCluster(ctx); err != nil {
			_ = stopAll(l.procs)
			return err
		}
	}
	return nil
}

// waitNode waits until node i is ready (/readyz: it has a leader and has
// applied the committed log), as etcd's ReadyNotify waits for its server:
// the first workload must not time an election.
func (l *leasehold) waitNode(ctx context.Context, i int) error {
	return l.procs[i].waitReady(ctx, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+l.addrs[i]+"/readyz", nil)
		if err != nil {
			return err
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_ = res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %s", res.Status)
		}
		return nil
	})
}

// profile fetches a CPU profile and an allocation profile of the server
// over the next d into dir/<label>.{cpu,allocs}.pprof, and an execution
// trace of its first second into dir/<label>.trace.
func (l *leasehold) profile(ctx context.Context, dir, label string, d time.Duration) error {
	secs := strconv.Itoa(max(1, int(d.Seconds())))
	fetches := []struct{ path, file string }{
		{"/debug/pprof/profile?seconds=" + secs, label + ".cpu.pprof"},
		{"/debug/pprof/allocs?seconds=" + secs, label + ".allocs.pprof"},
		{"/debug/pprof/trace?seconds=1", label + ".trace"},
	}
	errc := make(chan error, len(fetches))
	for _, p := range fetches {
		go func() { errc <- fetchTo(ctx, "http://"+l.addr+p.path, filepath.Join(dir, p.file)) }()
	}
	var errs []error
	for range fetches {
		errs = append(errs, <-errc)
	}
	return errors.Join(errs...)
}

func fetchTo(ctx context.Context, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, res.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, res.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func (l *leasehold) Dial(ctx context.Context) (conn, error) {
	c, err := client.Dial(ctx, strings.Join(l.addrs, ","))
	if err != nil {
		return nil, err
	}
	return &lhConn{c: c}, nil
}

type lhConn struct{ c *client.Client }

func (c *lhConn) Close() error { return c.c.Close() }

func (c *lhConn) NewSession(ctx context.Context, ttl time.Duration) (session, error) {
	s, err := c.c.NewSession(ctx, client.WithTTL(ttl), client.WithKeepAliveInterval(ttl/3), client.WithOwner("bench"))
	if err != nil {
		return nil, err
	}
	return lhSession{s}, nil
}

// Churn is CreateSession, one KeepAlive and CloseSession, as the Go client
// sends them (on its lock stream, where the server takes them there).
func (c *lhConn) Churn(ctx context.Context, ttl time.Duration) error {
	s, err := c.c.NewSession(ctx, client.WithTTL(ttl), client.WithOwner("bench"))
	if err != nil {
		return err
	}
	if _, err := c.c.RenewSession(ctx, s.ID()); err != nil {
		_ = s.Close(ctx)
		return err
	}
	return s.Close(ctx)
}

type lhSession struct{ s *client.Session }

func (s lhSession) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	l, err := s.s.Acquire(ctx, name)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (s lhSession) Alive() bool                     { return s.s.Err() == nil }
func (s lhSession) Crash()                          { s.s.Orphan() }
func (s lhSession) Close(ctx context.Context) error { return s.s.Close(ctx) }
