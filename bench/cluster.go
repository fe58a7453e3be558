package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/client"
)

// clusterNodes is the size of the clusters -cluster runs.
const clusterNodes = 3

// Leader-kill trial bounds: one acquire attempt, and the whole wait for the
// first acquire that succeeds after the kill. An attempt is given up after
// etcd's election timeout (1 s): with a 5 s bound, etcd's first attempt
// after the kill ran out the whole 5 s (its Mutex.Lock got no answer while
// the members elected), so the figure was the bound; leasehold's client
// retries inside one attempt by itself.
const (
	killAttempt = time.Second
	killWait    = 30 * time.Second
)

// errNotCluster: a leader kill needs more than one node.
var errNotCluster = errors.New("a single node has no leader to kill")

// members asks the cluster for its members and leader.
func (l *leasehold) members(ctx context.Context) ([]*client.Member, string, error) {
	c, err := client.Dial(ctx, strings.Join(l.addrs, ","), client.WithRetryTimeout(2*time.Second))
	if err != nil {
		return nil, "", err
	}
	defer c.Close()
	return c.Members(ctx)
}

// waitCluster waits until the cluster has a leader and every node is a
// voter it reaches, up to 60 s.
func (l *leasehold) waitCluster(ctx context.Context) error {
	return pollUntil(ctx, time.Minute, 50*time.Millisecond, nil, func(ctx context.Context) error {
		ms, leader, err := l.members(ctx)
		if err != nil {
			return err
		}
		if leader == "" {
			return errors.New("no leader")
		}
		if len(ms) != len(l.procs) {
			return fmt.Errorf("%d members, want %d", len(ms), len(l.procs))
		}
		for _, m := range ms {
			if m.GetRole() != "leader" && m.GetRole() != "follower" {
				return fmt.Errorf("member %s is %s", m.GetId(), m.GetRole())
			}
		}
		return nil
	})
}

func (l *leasehold) KillLeader(ctx context.Context) (int, time.Time, error) {
	if len(l.procs) < 2 {
		return 0, time.Time{}, errNotCluster
	}
	_, leader, err := l.members(ctx)
	if err != nil {
		return 0, time.Time{}, err
	}
	i, err := strconv.Atoi(strings.TrimPrefix(leader, "n")) // node ids are n1, n2, …
	if err != nil || i < 1 || i > len(l.procs) {
		return 0, time.Time{}, fmt.Errorf("leader %q is not a node of the harness", leader)
	}
	t := time.Now()
	l.procs[i-1].kill()
	return i - 1, t, nil
}

func (l *leasehold) Restart(ctx context.Context, i int) error {
	// --bootstrap is ignored once the data dir holds state.
	p, err := startProcess(l.bin, l.args[i], nil)
	if err != nil {
		return err
	}
	l.procs[i] = p
	if err := l.waitNode(ctx, i); err != nil {
		return err
	}
	return l.waitCluster(ctx)
}

func (e *etcd) KillLeader(ctx context.Context) (int, time.Time, error) {
	if len(e.procs) < 2 {
		return 0, time.Time{}, errNotCluster
	}
	c, err := e.dial(ctx, e.endpoints)
	if err != nil {
		return 0, time.Time{}, err
	}
	defer c.Close()
	for i, ep := range e.endpoints {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := c.Status(sctx, ep)
		cancel()
		if err != nil {
			continue
		}
		if st.Leader != 0 && st.Leader == st.Header.GetMemberId() {
			t := time.Now()
			e.procs[i].kill()
			return i, t, nil
		}
	}
	return 0, time.Time{}, errors.New("etcd: no member says it is the leader")
}

func (e *etcd) Restart(ctx context.Context, i int) error {
	if err := e.startMember(i); err != nil {
		return err
	}
	return e.waitMember(ctx, i)
}

// leaderKill: a client holding a session (TTL 10 s) on every node's
// endpoint; the leader's process is killed with SIGKILL, and the client at
// once tries to acquire a free name, each attempt bounded by killAttempt (1 s),
// again and again (a new session when its own was lost) until one
// succeeds. The figure is the time from the kill to that acquire's answer.
// The killed node is then started again with its data and the cluster
// waited for before the next trial.
func leaderKill(ctx context.Context, sys system, c conn, p params) ([]metric, error) {
	cl, ok := sys.(cluster)
	if !ok {
		return nil, errNotCluster
	}
	wl := "leader kill (SIGKILL)"
	var took []time.Duration
	for k := range p.LeaderKills {
		d, err := leaderKillTrial(ctx, cl, c, fmt.Sprintf("k/%d", k))
		if err != nil {
			return nil, fmt.Errorf("%s: trial %d: %w", wl, k+1, err)
		}
		took = append(took, d)
	}
	slices.Sort(took)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return []metric{
		{wl, "first acquire after kill ms (median)", false, ms(took[len(took)/2])},
		{wl, "first acquire after kill ms (max)", false, ms(took[len(took)-1])},
	}, nil
}

func leaderKillTrial(ctx context.Context, cl cluster, c conn, name string) (time.Duration, error) {
	s, err := c.NewSession(ctx, 10*time.Second)
	if err != nil {
		return 0, err
	}
	defer func() { _ = s.Close(ctx) }()
	if err := pair(ctx, s, name+"/warm", nil); err != nil {
		return 0, err
	}
	node, t0, err := cl.KillLeader(ctx)
	if err != nil {
		return 0, err
	}
	var took time.Duration
	err = pollUntil(ctx, killWait, 10*time.Millisecond, nil, func(ctx context.Context) error {
		if !s.Alive() {
			ns, err := c.NewSession(ctx, 10*time.Second)
			if err != nil {
				return err
			}
			_ = s.Close(ctx)
			s = ns
		}
		actx, cancel := context.WithTimeout(ctx, killAttempt)
		defer cancel()
		unlock, err := s.Lock(actx, name)
		if err != nil {
			return err
		}
		took = time.Since(t0)
		_ = unlock(ctx) // a release lost to the failover ends with the session
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("no acquire within %v of the kill: %w", killWait, err)
	}
	if err := cl.Restart(ctx, node); err != nil {
		return 0, fmt.Errorf("restart node %d: %w", node+1, err)
	}
	return took, nil
}
