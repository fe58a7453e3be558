//go:build leasehold_faults

package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/client"
)

// rec is one operation a client saw, as a JSON line.
type rec struct {
	K     string `json:"k"` // grant, put, release, read, error
	Proc  string `json:"p"`
	Op    string `json:"o,omitempty"` // error: the operation
	Name  string `json:"n,omitempty"`
	Lease string `json:"l,omitempty"`
	Token uint64 `json:"t,omitempty"`
	Value string `json:"v,omitempty"`
	Code  string `json:"c,omitempty"` // "" on success; "local:..." for a client-side error
	Msg   string `json:"m,omitempty"`
	Sent  int64  `json:"s"`
	Ret   int64  `json:"r"`
}

// codeOf is the leasehold code of err, or "local" for a state error of
// the client library's own (a session it already knows lost or closed, a
// lock it released), which no server sent.
func codeOf(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, client.ErrLeaseLost), errors.Is(err, client.ErrSessionClosed), errors.Is(err, client.ErrReleased):
		return "local"
	}
	return string(api.CodeOf(err))
}

// recorder appends records to a file, one write per line, so a line
// survives its process's SIGKILL.
type recorder struct {
	proc string
	mu   sync.Mutex // protects f
	f    *os.File
}

func (r *recorder) add(x rec) {
	x.Proc = r.proc
	b, _ := json.Marshal(x)
	r.mu.Lock()
	_, _ = r.f.Write(append(b, '\n'))
	r.mu.Unlock()
}

func (r *recorder) fail(op, name string, sent time.Time, err error) {
	r.add(rec{K: "error", Op: op, Name: name, Code: codeOf(err), Msg: err.Error(), Sent: sent.UnixNano(), Ret: time.Now().UnixNano()})
}

// clientMain is a client process: LEASEHOLD_FAULTS_CLIENT is its mode,
// the other LEASEHOLD_FAULTS_* variables its parameters.
func clientMain(mode string) int {
	env := func(k string) string { return os.Getenv("LEASEHOLD_FAULTS_" + k) }
	ttl, _ := time.ParseDuration(env("TTL"))
	untilNs, _ := strconv.ParseInt(env("UNTIL"), 10, 64)
	f, err := os.OpenFile(env("OUT"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer f.Close()
	r := &recorder{proc: env("ID"), f: f}
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, untilNs))
	defer cancel()
	var opts []client.DialOption
	if mode == "keeper" {
		// TestCutReplies cuts unary replies and lock-stream answers: a
		// keeper sends its lock operations as unary calls, a
		// stream-keeper on the lock stream (the client's default).
		opts = append(opts, client.WithUnaryLocks())
	}
	c, err := client.Dial(ctx, env("ENDPOINTS"), opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer c.Close()
	switch mode {
	case "worker":
		runWorker(ctx, c, r, strings.Split(env("NAMES"), ","), ttl, false)
	case "keeper", "stream-keeper":
		runWorker(ctx, c, r, strings.Split(env("NAMES"), ","), ttl, true)
	case "holder":
		runHolder(ctx, c, r, env("NAMES"), ttl)
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", mode)
		return 2
	}
	return 0
}

// runWorker loops acquire → fenced write of the name's KV key with the
// token → release over names until ctx ends. A session whose release
// failed may still hold the name: the worker leaves it (closes it, or with
// keep orphans it) and starts another, so that it never asks for a name
// its session may hold. With keep its last session outlives the process.
func runWorker(ctx context.Context, c *client.Client, r *recorder, names []string, ttl time.Duration, keep bool) {
	var s *client.Session
	leave := func() {
		if keep {
			s.Orphan()
			return
		}
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = s.Close(cctx)
		cancel()
	}
	defer func() {
		if s != nil {
			leave()
		}
	}()
	for i := 0; ctx.Err() == nil; i++ {
		if s == nil || s.Err() != nil {
			sent := time.Now()
			var err error
			if s, err = c.NewSession(ctx, client.WithTTL(ttl), client.WithOwner(r.proc)); err != nil {
				if ctx.Err() == nil {
					r.fail("session", "", sent, err)
				}
				s = nil
				continue
			}
		}
		name := names[i%len(names)]
		l, ok := acquire(ctx, s, r, name)
		if !ok {
			continue
		}
		put(ctx, c, r, name, fmt.Sprintf("%s-%d", r.proc, i), l.Token())
		sent := time.Now()
		rctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err := l.Release(rctx)
		cancel()
		if err != nil {
			r.add(rec{K: "error", Op: "release", Name: name, Lease: l.LeaseID(), Token: l.Token(), Code: codeOf(err), Msg: err.Error(), Sent: sent.UnixNano(), Ret: time.Now().UnixNano()})
			leave()
			s = nil
		} else {
			r.add(rec{K: "release", Name: name, Lease: l.LeaseID(), Token: l.Token(), Sent: sent.UnixNano(), Ret: time.Now().UnixNano()})
		}
	}
}

// runHolder acquires name once and then writes the name's KV key with its
// token every 100 ms until ctx ends, whatever happens to its session: a
// process that was paused and resumes still believes it holds the lock,
// and only the fence stands between its writes and the resource.
func runHolder(ctx context.Context, c *client.Client, r *recorder, name string, ttl time.Duration) {
	var l *client.Lock
	for l == nil && ctx.Err() == nil {
		sent := time.Now()
		s, err := c.NewSession(ctx, client.WithTTL(ttl), client.WithOwner(r.proc))
		if err != nil {
			r.fail("session", "", sent, err)
			continue
		}
		l, _ = acquire(ctx, s, r, name)
	}
	for i := 0; ctx.Err() == nil; i++ {
		put(ctx, c, r, name, fmt.Sprintf("%s-%d", r.proc, i), l.Token())
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func acquire(ctx context.Context, s *client.Session, r *recorder, name string) (*client.Lock, bool) {
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sent := time.Now()
	l, err := s.Acquire(actx, name)
	if err != nil {
		// Recorded also when the process's end cut it: the grant may have
		// been made (and withdrawn) while it was in flight.
		r.add(rec{K: "error", Op: "acquire", Name: name, Lease: s.ID(), Code: codeOf(err), Msg: err.Error(), Sent: sent.UnixNano(), Ret: time.Now().UnixNano()})
		return nil, false
	}
	r.add(rec{K: "grant", Name: name, Lease: l.LeaseID(), Token: l.Token(), Sent: sent.UnixNano(), Ret: time.Now().UnixNano()})
	return l, true
}

// put writes value under key with token; the record keeps every outcome
// (a failed write's value must never be read back unless the failure was
// outcome-unknown).
func put(ctx context.Context, c *client.Client, r *recorder, key, value string, token uint64) {
	r.add(r.put(ctx, c, key, value, token))
}

func (r *recorder) put(ctx context.Context, c *client.Client, key, value string, token uint64) rec {
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	sent := time.Now()
	err := c.KVPut(pctx, key, []byte(value), token, false)
	if err != nil && ctx.Err() != nil && !errors.Is(err, client.ErrOutcomeUnknown) {
		err = client.ErrOutcomeUnknown // the caller's end cut the call: it may have applied
	}
	return rec{K: "put", Proc: r.proc, Name: key, Token: token, Value: value, Code: codeOf(err), Msg: errString(err), Sent: sent.UnixNano(), Ret: time.Now().UnixNano()}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// proc is a client process the test started.
type proc struct {
	id, out string
	cmd     *exec.Cmd
}

// spawn starts a client process of mode on names until until.
func spawn(t *testing.T, mode, id, endpoints string, names []string, ttl time.Duration, until time.Time) *proc {
	t.Helper()
	out := fmt.Sprintf("%s/%s.jsonl", logDir(t), id)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(),
		"LEASEHOLD_FAULTS_CLIENT="+mode, "LEASEHOLD_FAULTS_ID="+id, "LEASEHOLD_FAULTS_ENDPOINTS="+endpoints,
		"LEASEHOLD_FAULTS_NAMES="+strings.Join(names, ","), "LEASEHOLD_FAULTS_TTL="+ttl.String(),
		"LEASEHOLD_FAULTS_UNTIL="+strconv.FormatInt(until.UnixNano(), 10), "LEASEHOLD_FAULTS_OUT="+out)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{id: id, out: out, cmd: cmd}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return p
}

func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// wait waits for the process to end by itself (it stops at its until).
func (p *proc) wait(t *testing.T, within time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(within):
		_ = p.cmd.Process.Kill()
		<-done
		t.Fatalf("client %s did not stop by itself within %v", p.id, within)
	}
}

// records reads what the process recorded so far.
func (p *proc) records(t *testing.T) []rec {
	t.Helper()
	f, err := os.Open(p.out)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []rec
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var x rec
		if err := json.Unmarshal(sc.Bytes(), &x); err != nil {
			continue // a line cut by SIGKILL
		}
		out = append(out, x)
	}
	return out
}

// awaitRecord polls p's records until one matches, within d.
func (p *proc) awaitRecord(t *testing.T, d time.Duration, match func(rec) bool) rec {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		for _, x := range p.records(t) {
			if match(x) {
				return x
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("client %s recorded nothing matching within %v", p.id, d)
	return rec{}
}
