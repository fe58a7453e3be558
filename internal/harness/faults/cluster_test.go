//go:build leasehold_faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// Timing of the binary (raftnode and lessor defaults): raft draws each
// election timeout from [500 ms, 1 s]; a new leader's grace is 500 ms.
const (
	electionTimeout = time.Second
	grace           = 500 * time.Millisecond
	drift           = 0.02
)

var binary string // the leasehold binary, built with the test hooks

func TestMain(m *testing.M) {
	// Re-executed as a node's first process inside its new network
	// namespace: bring lo up, then become the leasehold binary.
	if bin := os.Getenv("LEASEHOLD_FAULTS_EXEC"); bin != "" {
		if err := loopbackUp(); err != nil {
			fmt.Fprintln(os.Stderr, "faults: lo up:", err)
			os.Exit(3)
		}
		env := slicesDelete(os.Environ(), "LEASEHOLD_FAULTS_EXEC="+bin)
		err := syscall.Exec(bin, append([]string{bin}, os.Args[1:]...), env)
		fmt.Fprintln(os.Stderr, "faults: exec:", err)
		os.Exit(3)
	}
	// Re-executed as a client process.
	if mode := os.Getenv("LEASEHOLD_FAULTS_CLIENT"); mode != "" {
		os.Exit(clientMain(mode))
	}
	if sysSetns == 0 {
		fmt.Fprintln(os.Stderr, "internal/harness/faults: setns(2) is known here only on linux/amd64 and linux/arm64")
		os.Exit(1)
	}
	if os.Geteuid() != 0 {
		// Each node runs in a network namespace of its own (CLONE_NEWNET).
		fmt.Fprintln(os.Stderr, "internal/harness/faults: the fault schedules need root (network namespaces); run as root, as CI does")
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "leasehold-faults-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "leasehold")
	args := []string{"build", "-tags", "leasehold_testhooks,leasehold_failpoints", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, "../../../cmd/leasehold")...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build leasehold: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// logDir is where a test's node logs go: $LEASEHOLD_FAULTS_LOGDIR/<test>
// when set (kept after the run), else a temporary directory.
func logDir(t *testing.T) string {
	base := os.Getenv("LEASEHOLD_FAULTS_LOGDIR")
	if base == "" {
		return t.TempDir()
	}
	dir := filepath.Join(base, strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func slicesDelete(env []string, drop string) []string {
	var out []string
	for _, e := range env {
		if e != drop {
			out = append(out, e)
		}
	}
	return out
}

// node is one leasehold server process in a network namespace of its own.
type node struct {
	id        string
	api, raft int // ports, the same in every namespace
	dir       string
	logPath   string
	env       []string // test hooks
	join      string   // when set, started with --join this API address instead of --bootstrap

	mu  sync.Mutex // protects following
	cmd *exec.Cmd
	ns  *os.File // its current namespace; nil while down
}

func (n *node) apiAddr() string { return fmt.Sprintf("127.0.0.1:%d", n.api) }

// netns returns a duplicate of n's namespace file, which the caller
// closes (kill may close n's own at any time), or nil while n is down.
func (n *node) netns() *os.File {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ns == nil {
		return nil
	}
	fd, err := syscall.Dup(int(n.ns.Fd()))
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), n.ns.Name())
}

func (n *node) pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// cluster is three nodes and the links between their namespaces: from
// each node to every other node's API and raft ports, and from the test's
// own namespace to every node's API port.
type cluster struct {
	t     *testing.T
	nodes []*node
	boot  string

	mu    sync.Mutex         // protects following
	links map[string][]*link // by source node id ("host" for the test)
}

// startCluster starts three nodes (env: test hooks for every node) and
// waits until each answers /readyz.
func startCluster(t *testing.T, env ...string) *cluster {
	t.Helper()
	ports := servertest.FreePorts(t, 6)
	c := &cluster{t: t, links: map[string][]*link{}}
	var boot []string
	for i := range 3 {
		n := &node{id: fmt.Sprintf("n%d", i+1), api: ports[2*i], raft: ports[2*i+1], dir: t.TempDir(), env: env}
		n.logPath = filepath.Join(logDir(t), n.id+".log")
		c.nodes = append(c.nodes, n)
		boot = append(boot, fmt.Sprintf("%s=127.0.0.1:%d", n.id, n.raft))
	}
	c.boot = strings.Join(boot, ",")
	for _, n := range c.nodes {
		l, err := newLink("host", n.id, nil, n.api, n.netns)
		if err != nil {
			t.Fatal(err)
		}
		c.links["host"] = append(c.links["host"], l)
	}
	t.Cleanup(c.stop)
	for _, n := range c.nodes {
		c.start(n)
	}
	for _, n := range c.nodes {
		c.waitReady(n, 20*time.Second)
	}
	return c
}

// start runs n's process in a new network namespace and links that
// namespace to the other nodes.
func (c *cluster) start(n *node) {
	c.t.Helper()
	args := []string{"serve", "--node-id", n.id, "--listen", n.apiAddr(), "--raft-addr", fmt.Sprintf("127.0.0.1:%d", n.raft), "--data", n.dir, "--bootstrap", c.boot}
	if n.join != "" {
		args = append(args[:len(args)-2], "--join", n.join)
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "LEASEHOLD_FAULTS_EXEC="+binary), n.env...)
	// Pdeathsig: a node dies with the test process, even one killed by
	// the test's timeout.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid))
	if err != nil {
		c.t.Fatal(err)
	}
	n.mu.Lock()
	n.cmd, n.ns = cmd, ns
	n.mu.Unlock()
	var links []*link
	for _, o := range c.nodes {
		if o == n {
			continue
		}
		for _, port := range []int{o.api, o.raft} {
			l, err := newLink(n.id, o.id, ns, port, o.netns)
			if err != nil {
				c.t.Fatal(err)
			}
			links = append(links, l)
		}
	}
	c.mu.Lock()
	c.links[n.id] = links
	c.mu.Unlock()
}

// kill SIGKILLs n (as a power cut of its machine: its peers' connections
// to it break) and drops its namespace.
func (c *cluster) kill(n *node) {
	n.mu.Lock()
	cmd, ns := n.cmd, n.ns
	n.cmd, n.ns = nil, nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	c.mu.Lock()
	from := c.links[n.id]
	delete(c.links, n.id)
	var to []*link
	for _, ls := range c.links {
		for _, l := range ls {
			if l.to == n.id {
				to = append(to, l)
			}
		}
	}
	c.mu.Unlock()
	for _, l := range from {
		l.close()
	}
	for _, l := range to {
		l.reset()
	}
	ns.Close()
}

func (c *cluster) signal(n *node, sig syscall.Signal) {
	c.t.Helper()
	if pid := n.pid(); pid != 0 {
		if err := syscall.Kill(pid, sig); err != nil {
			c.t.Fatal(err)
		}
	}
}

// partition stalls every link between n and the other nodes, both ways
// (the test's own links to n stay up: a client on n's side of the cut).
func (c *cluster) partition(n *node) { c.setLinks(n, linkStalled) }

// heal lets traffic flow on every link again.
func (c *cluster) heal(n *node) { c.setLinks(n, linkUp) }

func (c *cluster) setLinks(n *node, s linkState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for from, ls := range c.links {
		for _, l := range ls {
			if from == "host" {
				continue
			}
			if l.from == n.id || l.to == n.id {
				l.set(s)
			}
		}
	}
}

func (c *cluster) stop() {
	for _, n := range c.nodes {
		c.signal(n, syscall.SIGCONT)
		c.kill(n)
	}
	c.mu.Lock()
	var all []*link
	for _, ls := range c.links {
		all = append(all, ls...)
	}
	c.links = map[string][]*link{}
	c.mu.Unlock()
	for _, l := range all {
		l.close()
	}
	// P9: no node panicked or raced (the binary is built with -race when
	// the tests are).
	for _, n := range c.nodes {
		b, _ := os.ReadFile(n.logPath)
		for _, bad := range []string{"panic:", "WARNING: DATA RACE", "fatal error:"} {
			if strings.Contains(string(b), bad) {
				c.t.Errorf("P9: the log of %s has %q", n.id, bad)
			}
		}
	}
	if c.t.Failed() {
		for _, n := range c.nodes {
			b, _ := os.ReadFile(n.logPath)
			c.t.Logf("log of %s (last 3000 bytes):\n%s", n.id, tail(string(b), 3000))
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (c *cluster) endpoints(except ...*node) string {
	var eps []string
	for _, n := range c.nodes {
		skip := false
		for _, e := range except {
			skip = skip || e == n
		}
		if !skip {
			eps = append(eps, n.apiAddr())
		}
	}
	return strings.Join(eps, ",")
}

func (c *cluster) waitReady(n *node, within time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	hc := &http.Client{Timeout: time.Second}
	last := "no answer"
	for time.Now().Before(deadline) {
		resp, err := hc.Get("http://" + n.apiAddr() + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = strings.TrimSpace(string(body))
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("%s not ready within %v: %s", n.id, within, last)
}

// leader returns a node of among whose /metrics say it leads, or nil. A
// deposed leader cut off from the others may still say so: awaitLeader
// confirms with a write.
func (c *cluster) leader(ctx context.Context, among []*node) *node {
	for _, n := range among {
		if v, err := servertest.ReadMetric(ctx, n.apiAddr(), "leasehold_is_leader"); err == nil && v == 1 {
			return n
		}
	}
	return nil
}

// awaitLeader polls until a majority of among names one leader that
// accepts a write, and returns it with the time it took; it fails the test
// after within.
func (c *cluster) awaitLeader(ctx context.Context, among []*node, within time.Duration) (*node, time.Duration) {
	c.t.Helper()
	start := time.Now()
	var last error
	for time.Since(start) < within {
		l := c.leader(ctx, among)
		if l == nil {
			last = errors.New("no node says it leads")
		}
		if l != nil {
			cl, err := client.Dial(ctx, l.apiAddr(), client.WithRetryTimeout(500*time.Millisecond))
			if err == nil {
				wctx, cancel := context.WithTimeout(ctx, time.Second)
				s, err := cl.NewSession(wctx, client.WithTTL(time.Second))
				if err == nil {
					_ = s.Close(wctx)
				}
				cancel()
				cl.Close()
				if err == nil {
					return l, time.Since(start)
				}
			}
			last = err
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("no leader among %d nodes accepted a write within %v (last: %v)", len(among), within, last)
	return nil, 0
}
