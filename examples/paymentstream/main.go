// Command paymentstream replays seed 004 — a stale leader's payment refused at the gateway —
// with no other service to start:
//
//	go run ./examples/paymentstream
//
// It starts, in this process and on loopback, a plain HTTP payment service that checks
// nothing and charges whatever reaches it, and the fencing gateway of package fence/gateway
// in front of it (its last accepted tokens in a bbolt file in a temporary directory). Leader A
// holds token 17; it pauses, its lease expires and leader B is elected with token 18. B's
// charge passes; A's late charge gets 409 stale-token from the gateway and never reaches the
// payment service. The gateway is then restarted on the same bbolt file and still refuses
// token 17. The tokens are given literally, as in the seed: the gateway only needs them to
// grow with every new leader, which is what a leasehold grant's Lock.Token guarantees.
//
// It prints the timeline and exits non-zero if any result differs from the expected one.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/gateway"
)

// stream is the resource key: one payment stream, one line of leaders.
const stream = "payments:stream-1"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "paymentstream:", err)
		os.Exit(1)
	}
}

// charge is one request to the payment service.
type charge struct {
	Payment string `json:"payment"`
	Cents   int    `json:"amount_cents"`
	Leader  string `json:"leader"`
	Token   string `json:"-"` // the Fencing-Token header the service saw (it ignores it)
}

// paymentService is the upstream of seed 004: it charges every request it receives and
// checks no token. It records what it saw, so the example can prove what never reached it.
type paymentService struct {
	mu      sync.Mutex // protects charges
	charges []charge
}

func (p *paymentService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/charge" {
		http.Error(w, "POST /charge only", http.StatusNotFound)
		return
	}
	var c charge
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&c); err != nil {
		http.Error(w, "bad charge: "+err.Error(), http.StatusBadRequest)
		return
	}
	c.Token = r.Header.Get(fence.DefaultTokenHeader)
	p.mu.Lock()
	p.charges = append(p.charges, c)
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, "{\"status\":\"charged\",\"payment\":%q}\n", c.Payment)
}

func (p *paymentService) seen() []charge {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]charge(nil), p.charges...)
}

// server is an HTTP server running on a loopback listener until stop.
type server struct {
	url  string
	stop func() error
}

// serve answers h on a listener at addr ("127.0.0.1:0" for a free port) until stop.
func serve(addr string, h http.Handler) (*server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	return &server{url: "http://" + ln.Addr().String(), stop: func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := srv.Shutdown(ctx)
		if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
			err = serr
		}
		return err
	}}, nil
}

// startGateway opens a gateway over dataFile and serves it on addr until stop, which also
// closes the gateway (and with it the bbolt file).
func startGateway(addr, upstream, dataFile string, transport http.RoundTripper) (*gateway.Gateway, *server, error) {
	cfg := gateway.DefaultConfig()
	cfg.Upstream = upstream
	cfg.DataFile = dataFile
	cfg.Transport = transport
	g, err := gateway.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = g.Close()
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(ctx, ln) }()
	return g, &server{url: "http://" + ln.Addr().String(), stop: func() error {
		cancel()
		return errors.Join(<-errc, g.Close())
	}}, nil
}

// answer is what a leader got back from the gateway.
type answer struct {
	status int
	stale  *fence.HTTPError // set for a stale-token refusal
	text   string
}

func (a answer) String() string {
	if a.stale != nil {
		return fmt.Sprintf("%d %s, last_token %d", a.status, a.stale.Code, a.stale.LastToken)
	}
	return fmt.Sprintf("%d %s", a.status, a.text)
}

// timeline prints the steps and counts results that differ from the expected ones.
type timeline struct {
	w    io.Writer
	step int
	bad  int
}

func (t *timeline) row(who, what, token, result, saw string, ok bool, want string) {
	t.step++
	mark := ""
	if !ok {
		t.bad++
		mark = "   UNEXPECTED, want " + want
	}
	line := fmt.Sprintf("%-4d %-9s %-46s %-5s %-31s %s%s", t.step, who, what, token, result, saw, mark)
	fmt.Fprintln(t.w, strings.TrimRight(line, " "))
}

func (t *timeline) note(format string, a ...any) { fmt.Fprintf(t.w, "     "+format+"\n", a...) }

func plural(n int) string {
	if n == 1 {
		return "1 charge"
	}
	return strconv.Itoa(n) + " charges"
}

// run plays the scenario and returns an error if any result is not the expected one.
func run(ctx context.Context, stdout io.Writer) (err error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "paymentstream-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	dataFile := filepath.Join(dir, "gateway.db")

	payments := &paymentService{}
	upstream, err := serve("127.0.0.1:0", payments)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, upstream.stop()) }()
	toUpstream := http.DefaultTransport.(*http.Transport).Clone() // the gateway's
	defer toUpstream.CloseIdleConnections()
	toGateway := http.DefaultTransport.(*http.Transport).Clone() // the leaders'
	defer toGateway.CloseIdleConnections()
	httpc := &http.Client{Transport: toGateway, Timeout: 10 * time.Second}

	_, gw, err := startGateway("127.0.0.1:0", upstream.url, dataFile, toUpstream)
	if err != nil {
		return err
	}
	gwAddr := strings.TrimPrefix(gw.url, "http://")
	defer func() {
		if gw != nil {
			err = errors.Join(err, gw.stop())
		}
	}()

	fmt.Fprintln(stdout, "seed 004: a stale leader's charge, refused by the fencing gateway")
	fmt.Fprintf(stdout, "  payment service (checks nothing)  %s\n", upstream.url)
	fmt.Fprintf(stdout, "  gateway (fence/gateway)           %s  tokens in %s\n\n", gw.url, dataFile)
	fmt.Fprintf(stdout, "%-4s %-9s %-46s %-5s %-31s %s\n", "STEP", "WHO", "REQUEST", "TOKEN", "RESULT", "PAYMENT SERVICE HAS SEEN")

	send := func(leader string, token uint64, payment string, cents int) (answer, error) {
		body, _ := json.Marshal(charge{Payment: payment, Cents: cents, Leader: leader})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw.url+"/charge", strings.NewReader(string(body)))
		if err != nil {
			return answer{}, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(fence.DefaultKeyHeader, stream)
		req.Header.Set(fence.DefaultTokenHeader, strconv.FormatUint(token, 10))
		resp, err := httpc.Do(req)
		if err != nil {
			return answer{}, fmt.Errorf("charge %s: %w", payment, err)
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		if err != nil {
			return answer{}, fmt.Errorf("charge %s: %w", payment, err)
		}
		a := answer{status: resp.StatusCode, text: "charged"}
		if resp.StatusCode != http.StatusOK {
			var e fence.HTTPErrorBody
			if json.Unmarshal(raw, &e) == nil && e.Error.Code == fence.CodeStaleToken {
				a.stale = &e.Error
			} else {
				a.text = strings.TrimSpace(string(raw))
			}
		}
		return a, nil
	}
	tl := &timeline{w: stdout}
	// charged expects a 200 and one more charge at the payment service.
	charged := func(who, leader string, token uint64, payment, what string) error {
		before := len(payments.seen())
		a, err := send(leader, token, payment, 1250)
		if err != nil {
			return err
		}
		n := len(payments.seen())
		ok := a.status == http.StatusOK && a.stale == nil && n == before+1
		tl.row(who, what, strconv.FormatUint(token, 10), a.String(), plural(n)+" (+1)", ok, "200 and the charge forwarded")
		return nil
	}
	// refused expects 409 stale-token with last_token 18 and no new charge upstream.
	refused := func(who, leader string, token uint64, payment, what string) error {
		before := len(payments.seen())
		a, err := send(leader, token, payment, 1250)
		if err != nil {
			return err
		}
		n := len(payments.seen())
		ok := a.status == http.StatusConflict && a.stale != nil && a.stale.LastToken == 18 && n == before
		tl.row(who, what, strconv.FormatUint(token, 10), a.String(), plural(n)+" (never saw it)", ok, "409 stale-token, last_token 18, nothing forwarded")
		return nil
	}

	if err := charged("leader A", "A", 17, "p-1001", "POST /charge p-1001 (A is leader)"); err != nil {
		return err
	}
	tl.note("leader A pauses (VM freeze). Its lease expires; B is elected with token 18.")
	if err := charged("leader B", "B", 18, "p-1002", "POST /charge p-1002"); err != nil {
		return err
	}
	if err := refused("leader A", "A", 17, "p-1003", "resumes, sends its late POST /charge p-1003"); err != nil {
		return err
	}

	// Restart the gateway on the same bbolt file and address.
	stopErr := gw.stop()
	gw = nil
	if stopErr != nil {
		return fmt.Errorf("stop gateway: %w", stopErr)
	}
	toGateway.CloseIdleConnections()
	g, gw, err := startGateway(gwAddr, upstream.url, dataFile, toUpstream)
	if err != nil {
		return fmt.Errorf("restart gateway: %w", err)
	}
	last, err := g.LastToken(ctx, stream)
	if err != nil {
		return err
	}
	tl.row("gateway", "restarted on the same bbolt file", "-", "last token "+strconv.FormatUint(last, 10), "", last == 18, "last token 18")

	if err := refused("leader A", "A", 17, "p-1003", "retries POST /charge p-1003"); err != nil {
		return err
	}
	if err := charged("leader B", "B", 18, "p-1004", "POST /charge p-1004"); err != nil {
		return err
	}

	// The payment service's own record: only A's charge from before B, then B's.
	var ledger []string
	for _, c := range payments.seen() {
		ledger = append(ledger, fmt.Sprintf("%s by %s (token %s)", c.Payment, c.Leader, c.Token))
	}
	got := strings.Join(ledger, ", ")
	const want = "p-1001 by A (token 17), p-1002 by B (token 18), p-1004 by B (token 18)"
	fmt.Fprintf(stdout, "\npayment service ledger: %s\n", got)
	if got != want {
		tl.bad++
		fmt.Fprintf(stdout, "UNEXPECTED ledger, want: %s\n", want)
	}
	if tl.bad > 0 {
		return fmt.Errorf("%d results differ from seed 004", tl.bad)
	}
	fmt.Fprintln(stdout, "ok: the stale leader's charge never reached the payment service, before or after the gateway restart")
	return nil
}
