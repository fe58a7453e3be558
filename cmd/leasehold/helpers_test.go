package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binEnv is the environment of the binary under test. A -race binary
// sleeps 1 s at exit by default (GORACE atexit_sleep_ms) to collect race
// reports; every CLI call would pay it.
func binEnv(extra ...string) []string {
	env := append(os.Environ(), "GORACE=atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	return append(env, extra...)
}

// checkNoRace fails the test if a -race binary reported a data race.
func checkNoRace(t *testing.T, what, output string) {
	t.Helper()
	if strings.Contains(output, "WARNING: DATA RACE") {
		t.Errorf("%s reported a data race:\n%s", what, output)
	}
}

// serverProc is a `leasehold serve` process on a data dir and a 127.0.0.1
// port.
type serverProc struct {
	Addr string
	Dir  string

	cmd    *exec.Cmd
	log    *syncBuffer
	exited chan struct{} // closed when the process has been waited for
	err    error         // the process's exit, valid after exited
}

// startServe starts `leasehold serve` on dir and a free port, and waits until
// it leads. The process is stopped when the test ends.
func startServe(t *testing.T, dir string) *serverProc {
	t.Helper()
	return startServeAt(t, dir, "")
}

// startServeAt is startServe on addr, or on a free port when addr is empty
// or taken, with extra serve flags. Ports are found by listening on :0 and
// closing; another process may take the port in between, so a failed bind
// is retried on a new one.
func startServeAt(t *testing.T, dir, addr string, extra ...string) *serverProc {
	t.Helper()
	var errs []error
	for range 5 {
		if addr == "" {
			addr = freeAddr(t)
		}
		p, err := tryServe(t, dir, addr, extra...)
		if err == nil {
			return p
		}
		errs = append(errs, err)
		addr = ""
	}
	t.Fatalf("leasehold serve did not start: %v", errors.Join(errs...))
	return nil
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// tryServe starts serve with extra flags; with TLS flags (--cert) it waits for the node to
// lead by its log instead of /healthz.
func tryServe(t *testing.T, dir, addr string, extra ...string) (*serverProc, error) {
	p := &serverProc{Addr: addr, Dir: dir, log: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(leaseholdBin, append([]string{"serve", "--data", dir, "--listen", addr, "--log-level", "info"}, extra...)...)
	ready := func() bool { return healthy(addr) }
	if slices.Contains(extra, "--cert") {
		ready = func() bool { return strings.Contains(p.log.String(), "leader=true") }
	}
	p.cmd.Env = binEnv()
	p.cmd.Stderr = p.log
	p.cmd.Stdout = p.log
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.Stop(t)
		checkNoRace(t, "leasehold serve", p.log.String())
		if t.Failed() {
			t.Logf("leasehold serve %s log:\n%s", addr, p.log.String())
		}
	})
	// The serving line is logged only after the bind succeeded, so the
	// answers below come from this process and not one that won the port.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(p.log.String(), "leasehold serving") || !ready() {
		select {
		case <-p.exited:
			return nil, fmt.Errorf("serve on %s exited (%v): %s", addr, p.err, p.log.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.Kill(t)
			return nil, fmt.Errorf("serve on %s: no leader after 20s: %s", addr, p.log.String())
		}
	}
	return p, nil
}

func healthy(addr string) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/readyz")
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Kill ends the server with SIGKILL (kill -9) and waits for it.
func (p *serverProc) Kill(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// Stop asks the server to shut down (SIGTERM) and kills it after 10 s.
func (p *serverProc) Stop(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Errorf("leasehold serve %s did not stop on SIGTERM; killing it", p.Addr)
		p.Kill(t)
	}
}

// result is the outcome of one CLI run.
type result struct {
	args   []string
	stdout string
	stderr string
	code   int
}

func (r result) String() string {
	return fmt.Sprintf("leasehold %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// cli runs the leasehold binary with args against this server: the
// --endpoints flag goes before a "--" (after it, args belong to run's
// command).
func (p *serverProc) cli(t *testing.T, args ...string) result {
	t.Helper()
	i := slices.Index(args, "--")
	if i < 0 {
		i = len(args)
	}
	return cli(t, slices.Concat(args[:i], []string{"--endpoints", p.Addr}, args[i:])...)
}

// cli runs the leasehold binary with args and returns its output and exit
// status; it fails the test if the binary runs for more than 30 s.
func cli(t *testing.T, args ...string) result {
	t.Helper()
	return cliEnv(t, nil, args...)
}

// cliEnv is cli with extra environment variables (NAME=value).
func cliEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, leaseholdBin, args...)
	cmd.Env = binEnv(env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{args: args, stdout: stdout.String(), stderr: stderr.String()}
	checkNoRace(t, "leasehold "+strings.Join(args, " "), r.stderr)
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("leasehold %s: still running after 30s", strings.Join(args, " "))
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("leasehold %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// ok fails the test unless the command exited 0, and returns its
// stdout decoded as exactly one JSON object into v.
func ok[T any](t *testing.T, r result) T {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("%v", r)
	}
	return oneJSON[T](t, r)
}

// fails fails the test unless the command exited with exit and printed one
// JSON error object with code, and returns that object.
func fails(t *testing.T, r result, code string, exit int) errorOut {
	t.Helper()
	e := oneJSON[errorOut](t, r)
	if r.code != exit || e.Error.Code != code || e.Error.Message == "" {
		t.Fatalf("want exit %d and error code %q with a message; got %v", exit, code, r)
	}
	return e
}

// oneJSON decodes stdout as exactly one JSON object (nothing else but
// whitespace) into a T; unknown fields are allowed.
func oneJSON[T any](t *testing.T, r result) T {
	t.Helper()
	var v T
	if !strings.HasPrefix(strings.TrimSpace(r.stdout), "{") {
		t.Fatalf("stdout is not one JSON object: %v", r)
	}
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("stdout is not JSON (%v): %v", err, r)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("stdout has more than one JSON value: %v", r)
	}
	return v
}

// The CLI's JSON outputs as the issue specifies them, written out here
// rather than taken from the command's own types.
type (
	holdingOut struct {
		Name    string `json:"name"`
		LeaseID string `json:"lease_id"`
		Token   uint64 `json:"token"`
		TTLMs   int64  `json:"ttl_ms"`
		Owner   string `json:"owner"`
	}
	statusOut struct {
		Name   string `json:"name"`
		Held   bool   `json:"held"`
		Holder *struct {
			Owner       string `json:"owner"`
			LeaseID     string `json:"lease_id"`
			Token       uint64 `json:"token"`
			RemainingMs int64  `json:"remaining_ttl_ms"`
		} `json:"holder"`
		Waiters []struct {
			LeaseID string `json:"lease_id"`
			Owner   string `json:"owner"`
		} `json:"waiters"`
	}
	kvPutOut struct {
		Key    string `json:"key"`
		Token  uint64 `json:"token"`
		Status string `json:"status"`
	}
	kvGetOut struct {
		Key   string `json:"key"`
		Value string `json:"value"`
		Token uint64 `json:"token"`
	}
	releaseOut struct {
		Name     string `json:"name"`
		Released bool   `json:"released"`
	}
	lsOut struct {
		Locks     []statusOut `json:"locks"`
		Truncated bool        `json:"truncated"`
	}
	errorOut struct {
		Error struct {
			Code      string `json:"code"`
			Message   string `json:"message"`
			LastToken uint64 `json:"last_token"`
		} `json:"error"`
	}
	eventOut struct {
		Type    string `json:"type"`
		Name    string `json:"name"`
		LeaseID string `json:"lease_id"`
		Owner   string `json:"owner"`
		Token   uint64 `json:"token"`
		Index   uint64 `json:"index"`
		UnixMs  int64  `json:"unix_ms"`
	}
)

// status returns the JSON status of name.
func (p *serverProc) status(t *testing.T, name string) statusOut {
	t.Helper()
	return ok[statusOut](t, p.cli(t, "status", name, "-o", "json"))
}

// eventually polls cond until it is true and fails the test after d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		<-tick.C
	}
}

// startGroup starts cmd in a process group of its own and kills the group
// (the process and any children it started) when the test ends.
func startGroup(t *testing.T, cmd *exec.Cmd) <-chan error {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	done := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		done <- cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-pgid, syscall.SIGCONT)
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-exited
	})
	return done
}

// exitStatus waits at most d for a process started by startGroup and
// returns its exit status.
func exitStatus(t *testing.T, done <-chan error, d time.Duration, what string) int {
	t.Helper()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return 0
	case <-time.After(d):
		t.Fatalf("%s still running after %s", what, d)
		return -1
	}
}

// readFile returns the file's content, or "" when it does not exist yet.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(b)
}

// syncBuffer is a bytes.Buffer safe for a writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex // protects following
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
