package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fence"
)

// lateUpstream applies a write (records token:key) at once, or, with X-Slow, after working
// upstreamWork whether or not its caller is still connected: as a database call goes on when
// the HTTP request that made it is abandoned. started receives the key of every slow write it
// began.
type lateUpstream struct {
	srv     *httptest.Server
	started chan string

	mu      sync.Mutex // protects applied
	applied []string
}

const upstreamWork = 1500 * time.Millisecond

func newLateUpstream(t *testing.T) *lateUpstream {
	u := &lateUpstream{started: make(chan string, 16)}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Slow") != "" {
			u.started <- r.Header.Get(fence.DefaultKeyHeader)
			time.Sleep(upstreamWork) // the upstream's own work, not a wait for a condition
		}
		u.mu.Lock()
		u.applied = append(u.applied, r.Header.Get(fence.DefaultTokenHeader)+":"+r.Header.Get(fence.DefaultKeyHeader))
		u.mu.Unlock()
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *lateUpstream) order(key string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(u.applied), func(s string) bool { return !strings.HasSuffix(s, ":"+key) })
}

// gatewayProc is one `leasehold gateway` process.
type gatewayProc struct {
	cmd    *exec.Cmd
	log    *syncBuffer
	listen string
	launch time.Time // when the process was started: its settle time ends after launch+settle
}

func startGatewayProc(t *testing.T, listen string, args ...string) *gatewayProc {
	t.Helper()
	p := &gatewayProc{log: &syncBuffer{}, listen: listen}
	p.cmd = exec.Command(leaseholdBin, append([]string{"gateway", "--listen", listen, "--admin-listen", ""}, args...)...)
	p.cmd.Env = binEnv()
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.launch = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.kill)
	return p
}

// kill stops the process by its PID (SIGKILL: nothing it was forwarding is finished).
func (p *gatewayProc) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}

// write sends a fenced POST for key with token; status 0 means the gateway did not answer.
func (p *gatewayProc) write(key string, token uint64, slow bool) (status int, retryAfter string) {
	req, _ := http.NewRequest(http.MethodPost, "http://"+p.listen+"/w", strings.NewReader("v"))
	req.Header.Set(fence.DefaultKeyHeader, key)
	req.Header.Set(fence.DefaultTokenHeader, fmt.Sprint(token))
	if slow {
		req.Header.Set("X-Slow", "1")
	}
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, ""
	}
	r.Body.Close()
	return r.StatusCode, r.Header.Get("Retry-After")
}

// writeUntilAdmitted retries a write the gateway refuses as unsettled (503 with
// Retry-After) or does not answer yet, as a client honouring Retry-After does, for at most
// 20 s, and returns the status and when it was answered.
func (p *gatewayProc) writeUntilAdmitted(t *testing.T, key string, token uint64) (int, time.Time) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; {
		status, retry := p.write(key, token, false)
		switch {
		case status == http.StatusServiceUnavailable && retry == "":
			t.Fatalf("write %s/%d refused with 503 without Retry-After\n%s", key, token, p.log.String())
		case status != 0 && status != http.StatusServiceUnavailable:
			return status, time.Now()
		case time.Now().After(deadline):
			t.Fatalf("write %s/%d still refused (%d) after 20 s\n%s", key, token, status, p.log.String())
		}
		time.Sleep(20 * time.Millisecond) // the client's retry pace
	}
}

// TestGatewaySettleProcess runs `leasehold gateway --settle` in front of an upstream that
// keeps working on a request after the gateway left it. Token 17 times out at the gateway
// (502) while the upstream still works on it: token 18 for the same key is refused (503,
// Retry-After) until the settle time after 17's exchange ended, and 17's write lands before
// 18's. Then the gateway is killed while it forwards token 27; restarted on the same data, it
// admits nothing for the settle time after its start, so 28 lands after 27.
func TestGatewaySettleProcess(t *testing.T) {
	t.Parallel()
	const settle = 2 * time.Second // above the upstream's 1.5 s of work
	// Below the upstream's 1.5 s of work, far above what a plain write takes even on a
	// loaded machine with -race (at 200 ms the warm-up write itself once timed out).
	const upstreamTimeout = time.Second
	u := newLateUpstream(t)
	data := filepath.Join(t.TempDir(), "gw.db")
	listen := freeAddr(t)
	args := []string{"--upstream", u.srv.URL, "--data", data, "--upstream-timeout", upstreamTimeout.String(), "--settle", settle.String()}
	gw := startGatewayProc(t, listen, args...)
	if status, at := gw.writeUntilAdmitted(t, "warm-up", 1); status != http.StatusOK || at.Sub(gw.launch) < settle {
		t.Fatalf("first write admitted %v after launch with %d, want 200 after the settle time", at.Sub(gw.launch), status)
	}

	// 17's exchange ends at the gateway's upstream timeout after it was sent, at the
	// earliest; the settle time counts from then (the 502 may reach this test later).
	sent := time.Now()
	if status, _ := gw.write("balance", 17, true); status != http.StatusBadGateway {
		t.Fatalf("the slow write of token 17: %d, want 502 after the upstream timeout", status)
	}
	if status, retry := gw.write("balance", 18, false); status != http.StatusServiceUnavailable || retry == "" {
		t.Fatalf("token 18 right after 17 timed out: %d (Retry-After %q), want 503 with Retry-After", status, retry)
	}
	status, at := gw.writeUntilAdmitted(t, "balance", 18)
	if earliest := upstreamTimeout + settle; status != http.StatusOK || at.Sub(sent) < earliest {
		t.Fatalf("token 18 admitted %v after 17 was sent with %d, want 200 no earlier than the upstream timeout plus the settle time, %v", at.Sub(sent), status, earliest)
	}
	if got, want := u.order("balance"), []string{"17:balance", "18:balance"}; !slices.Equal(got, want) {
		t.Fatalf("upstream applied %q, want %q: the older write landed after the newer", got, want)
	}

	// Killed while forwarding token 27; the upstream goes on with it.
	done := make(chan int, 1)
	go func() { s, _ := gw.write("ledger", 27, true); done <- s }()
	for reached := ""; reached != "ledger"; {
		select {
		case reached = <-u.started: // 17's "balance" first
		case <-time.After(20 * time.Second):
			t.Fatalf("token 27 never reached the upstream\n%s", gw.log.String())
		}
	}
	gw.kill()
	if s := <-done; s != 0 {
		t.Fatalf("token 27 answered %d by a killed gateway", s)
	}
	gw = startGatewayProc(t, listen, args...)
	status, at = gw.writeUntilAdmitted(t, "ledger", 28)
	if status != http.StatusOK || at.Sub(gw.launch) < settle {
		t.Fatalf("after a restart, token 28 admitted %v after launch with %d, want 200 after the settle time %v", at.Sub(gw.launch), status, settle)
	}
	if got, want := u.order("ledger"), []string{"27:ledger", "28:ledger"}; !slices.Equal(got, want) {
		t.Fatalf("upstream applied %q, want %q: the write in flight when the gateway died landed after the newer one", got, want)
	}
}
