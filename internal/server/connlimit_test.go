package server_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/admission"
	"github.com/leasehold/leasehold/internal/certs"
	"github.com/leasehold/leasehold/internal/harness/servertest"
	"github.com/leasehold/leasehold/internal/server"
	"github.com/leasehold/leasehold/internal/testserver"
)

// dialerFrom dials from the loopback address src (Linux answers every
// 127.0.0.0/8 address), so that one test can be several clients.
func dialerFrom(src string) *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
}

// hold dials n connections to addr from src that send nothing, and closes
// them when the test ends. It returns them.
func hold(t *testing.T, addr, src string, n int) []net.Conn {
	t.Helper()
	d := dialerFrom(src)
	var conns []net.Conn
	for range n {
		c, err := d.Dial("tcp", addr)
		mustOK(t, "dial from "+src, err)
		t.Cleanup(func() { _ = c.Close() })
		conns = append(conns, c)
	}
	return conns
}

// answer reads what the server sends on c until it closes c or 10 s pass.
func answer(c net.Conn) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	return string(b), err
}

// TestLimitConnsPerAddress: one address holding its share of connections
// is refused beyond it, naming conns-per-address, while a client from
// another address still gets in although the flood asked for more than
// the node's whole conns.
func TestLimitConnsPerAddress(t *testing.T) {
	c := servertest.Start(t, withLimits(func(l *admission.Limits) { l.Conns, l.ConnsPerAddress = 100, 40 }))
	hold(t, c.Addr, "127.0.0.2", 40)
	// Beyond 40 (the kernel queues them in order; the server answers in
	// order), every connection from 127.0.0.2 is refused, though conns has
	// room for 60 more.
	for range 80 {
		conn, err := dialerFrom("127.0.0.2").Dial("tcp", c.Addr)
		mustOK(t, "dial", err)
		got, _ := answer(conn)
		_ = conn.Close()
		if !strings.HasPrefix(got, "HTTP/1.1 429") || !strings.Contains(got, "40 connections from 127.0.0.2 are open") || !strings.Contains(got, "serve --limit conns-per-address=N") {
			t.Fatalf("connection beyond the address's share answered %q; want a 429 naming conns-per-address", got)
		}
	}
	// Another address connects and works, on a connection of its own.
	h2 := &http.Transport{DialContext: dialerFrom("127.0.0.3").DialContext, Protocols: new(http.Protocols)}
	h2.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(h2.CloseIdleConnections)
	other := leaseholdv1connect.NewLeaseholdServiceClient(&http.Client{Transport: h2}, c.URL, connect.WithGRPC())
	newSession(t, other, 10000, "other address")
	if got := sample(t, scrape(t, c), `leasehold_limit_refused_total{limit="conns-per-address"}`); got != "80" {
		t.Fatalf("refused conns-per-address = %s, want 80", got)
	}
}

// pkiDir makes a CA, a node certificate for 127.0.0.1 and client
// certificates for names in a temporary dir.
func pkiDir(t *testing.T, names ...string) string {
	t.Helper()
	o := certs.Options{Dir: t.TempDir()}
	mustOK(t, "CA", certs.CreateCA(o))
	mustOK(t, "node certificate", certs.CreateNode(o, []string{"127.0.0.1"}))
	for _, n := range names {
		mustOK(t, "client certificate "+n, certs.CreateClient(o, n))
	}
	return o.Dir
}

// startTLS serves a node with mutual TLS from the certificates in dir
// and limits l; reg receives its metrics.
func startTLS(t *testing.T, dir string, reg prometheus.Registerer, l func(*admission.Limits)) string {
	t.Helper()
	conf, err := certs.ServerConfig(filepath.Join(dir, certs.NodeCert), filepath.Join(dir, certs.NodeKey), filepath.Join(dir, certs.CACert))
	mustOK(t, "server TLS", err)
	ts, err := testserver.Open(t.TempDir(), servertest.Logger(t), func(c *server.Config) {
		c.TLS, c.PeerClientTLS = conf, clientTLS(t, dir, certs.NodeCert, certs.NodeKey)
		c.Registerer = reg
		l(&c.Limits)
	})
	mustOK(t, "start", err)
	t.Cleanup(func() { _ = ts.Stop() })
	return ts.Addr
}

// clientTLS is a client configuration presenting the certificate in
// dir's files cert and key.
func clientTLS(t *testing.T, dir, cert, key string) *tls.Config {
	t.Helper()
	conf, err := certs.ClientConfig(filepath.Join(dir, certs.CACert), filepath.Join(dir, cert), filepath.Join(dir, key))
	mustOK(t, "client TLS", err)
	return conf
}

// tlsClient is a gRPC client over HTTP/2 and TLS, dialing from src.
func tlsClient(t *testing.T, addr, src string, conf *tls.Config) leaseholdv1connect.LeaseholdServiceClient {
	tr := &http.Transport{DialContext: dialerFrom(src).DialContext, TLSClientConfig: conf, Protocols: new(http.Protocols)}
	tr.Protocols.SetHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return leaseholdv1connect.NewLeaseholdServiceClient(&http.Client{Transport: tr}, "https://"+addr, connect.WithGRPC())
}

// refusedIn returns leasehold_limit_refused_total{limit} in reg.
func refusedIn(t *testing.T, reg *prometheus.Registry, limit string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	mustOK(t, "gather", err)
	for _, mf := range mfs {
		if mf.GetName() != "leasehold_limit_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "limit" && lp.GetValue() == limit {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestLimitHandshakeFlood: on a mutual-TLS port, connections that never
// start their TLS handshake, from several addresses and more of them than
// conns, neither keep a client with a certificate from connecting and
// creating a session nor stay open past the handshake timeout.
func TestLimitHandshakeFlood(t *testing.T) {
	dir := pkiDir(t, "alice")
	reg := prometheus.NewRegistry()
	addr := startTLS(t, dir, reg, func(l *admission.Limits) {
		l.Conns, l.HandshakesPerAddress, l.HandshakeTimeout = 50, 20, time.Second
		l.ReadHeaderTimeout = time.Minute // the handshake timeout closes them, not this
	})
	start := time.Now()
	var silent []net.Conn
	for _, src := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		silent = append(silent, hold(t, addr, src, 30)...)
	}
	// 60 connections in their handshake, more than conns: a client with a
	// certificate still gets in.
	alice := tlsClient(t, addr, "127.0.0.1", clientTLS(t, dir, certs.ClientCert("alice"), certs.ClientKey("alice")))
	newSession(t, alice, 10000, "alice")

	var wg sync.WaitGroup
	var mu sync.Mutex
	closed, refused := 0, 0
	var late []string
	for _, conn := range silent {
		wg.Go(func() {
			got, err := answer(conn)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case strings.Contains(got, "serve --limit handshakes-per-address=N"):
				refused++
			case err == nil && got == "" && time.Since(start) < 5*time.Second:
				closed++
			default:
				late = append(late, fmt.Sprintf("%q after %v (%v)", got, time.Since(start).Round(time.Millisecond), err))
			}
		})
	}
	wg.Wait()
	if len(late) > 0 || closed != 60 || refused != 30 {
		t.Fatalf("%d silent connections closed within 5 s, %d refused (want 60 and 30); others: %v", closed, refused, late)
	}
	if got := refusedIn(t, reg, "handshakes-per-address"); got != 30 {
		t.Fatalf("refused handshakes-per-address = %g, want 30", got)
	}
}

// get sends GET /healthz over HTTP/1.1 on a new TLS connection with
// conf, and returns the status line and body; the connection stays open
// until the test ends unless it was refused.
func get(t *testing.T, addr string, conf *tls.Config) string {
	t.Helper()
	conf = conf.Clone()
	conf.NextProtos = []string{"http/1.1"}
	conn, err := tls.DialWithDialer(dialerFrom("127.0.0.1"), "tcp", addr, conf)
	mustOK(t, "dial", err)
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: leasehold\r\n\r\n")
	mustOK(t, "write", err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return err.Error()
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		// A refused connection is closed once answered.
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		if n, err := conn.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			return fmt.Sprintf("still open after %s %s (read %d bytes, %v)", resp.Status, b, n, err)
		}
	}
	_ = conn.SetDeadline(time.Time{})
	return resp.Status + " " + string(b)
}

// TestLimitConnsPerPrincipal: a principal (a verified client certificate)
// at its share of connections is refused beyond it, over HTTP/1.1 and
// HTTP/2, while another principal from the same address gets in, and
// node certificates count toward no share.
func TestLimitConnsPerPrincipal(t *testing.T) {
	dir := pkiDir(t, "alice", "bob")
	reg := prometheus.NewRegistry()
	addr := startTLS(t, dir, reg, func(l *admission.Limits) { l.ConnsPerPrincipal = 3 })
	alice := clientTLS(t, dir, certs.ClientCert("alice"), certs.ClientKey("alice"))
	for i := range 3 {
		if got := get(t, addr, alice); !strings.HasPrefix(got, "200") {
			t.Fatalf("alice's connection %d: %s", i+1, got)
		}
	}
	if got := get(t, addr, alice); !strings.HasPrefix(got, "429") || !strings.Contains(got, "principal user:alice has 3 connections open") || !strings.Contains(got, "serve --limit conns-per-principal=N") {
		t.Fatalf("alice's 4th connection over HTTP/1.1: %q; want a 429 naming conns-per-principal", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := tlsClient(t, addr, "127.0.0.1", alice).CreateSession(ctx, connect.NewRequest(&pb.CreateSessionRequest{TtlMs: 10000}))
	wantLimit(t, "alice's 4th connection over HTTP/2", err, "conns-per-principal")
	if got := refusedIn(t, reg, "conns-per-principal"); got < 2 {
		t.Fatalf("refused conns-per-principal = %g, want at least 2", got)
	}
	// bob, from the same address, gets in.
	bob := tlsClient(t, addr, "127.0.0.1", clientTLS(t, dir, certs.ClientCert("bob"), certs.ClientKey("bob")))
	newSession(t, bob, 10000, "bob")
	// A node is no principal: its connections are not counted.
	node := clientTLS(t, dir, certs.NodeCert, certs.NodeKey)
	for i := range 5 {
		if got := get(t, addr, node); !strings.HasPrefix(got, "200") {
			t.Fatalf("node connection %d: %s", i+1, got)
		}
	}
}

// TestLimitConnFloodOneAddress: one address holding idle connections, far
// more than conns, takes only its own share: a well-behaved client keeps
// its lock and new clients from another address get in while it floods.
func TestLimitConnFloodOneAddress(t *testing.T) {
	c := servertest.Start(t, withLimits(func(l *admission.Limits) { l.Conns, l.ConnsPerAddress = 300, 100 }))
	k := startCanary(t, c)
	idle := k.p99(100)
	var mu sync.Mutex
	held, refused, joined := 0, 0, 0
	var failures []string
	k.during("2000 idle connections from one address", idle, func(ctx context.Context, ready func()) {
		var wg sync.WaitGroup
		defer wg.Wait()
		d := dialerFrom("127.0.0.2")
		for range 2000 {
			conn, err := d.Dial("tcp", c.Addr)
			if err != nil {
				mu.Lock()
				failures = append(failures, "flood dial: "+err.Error())
				mu.Unlock()
				break
			}
			context.AfterFunc(ctx, func() { _ = conn.Close() })
			wg.Go(func() {
				b, _ := io.ReadAll(conn)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case strings.HasPrefix(string(b), "HTTP/1.1 429") && strings.Contains(string(b), "serve --limit conns-per-address=N"):
					refused++
				case ctx.Err() != nil:
					held++
				default:
					failures = append(failures, fmt.Sprintf("flood connection read %q", b))
				}
			})
		}
		_ = servertest.Eventually(45*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return refused >= 1900 })
		// New clients, each on a connection of its own, from another address.
		for i := range 10 {
			tr := h2c()
			tr.DialContext = dialerFrom("127.0.0.3").DialContext
			cl := leaseholdv1connect.NewLeaseholdServiceClient(&http.Client{Transport: tr}, c.URL, connect.WithGRPC())
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := cl.CreateSession(sctx, connect.NewRequest(&pb.CreateSessionRequest{TtlMs: 10000, Owner: fmt.Sprintf("new client %d", i)}))
			cancel()
			tr.CloseIdleConnections()
			mu.Lock()
			if err == nil {
				joined++
			} else {
				failures = append(failures, fmt.Sprintf("new client %d: %v", i, err))
			}
			mu.Unlock()
		}
		ready()
		<-ctx.Done()
	})
	if len(failures) > 0 || held != 100 || refused != 1900 || joined != 10 {
		t.Fatalf("%d flood connections held, %d refused (want 100 and 1900), %d of 10 new clients got in; failures: %v", held, refused, joined, failures)
	}
}

// TestLimitHandshakesNodeWide: the connections in their TLS handshake are
// bounded on the node too, so that many addresses cannot take its
// descriptors with handshakes; once one ends, another address gets in.
func TestLimitHandshakesNodeWide(t *testing.T) {
	dir := pkiDir(t, "alice")
	reg := prometheus.NewRegistry()
	addr := startTLS(t, dir, reg, func(l *admission.Limits) { l.Handshakes, l.HandshakeTimeout = 10, time.Minute })
	silent := hold(t, addr, "127.0.0.2", 10)
	conn, err := dialerFrom("127.0.0.3").Dial("tcp", addr)
	mustOK(t, "dial", err)
	got, _ := answer(conn)
	_ = conn.Close()
	if !strings.HasPrefix(got, "HTTP/1.1 429") || !strings.Contains(got, "10 connections are in their TLS handshake on this node") || !strings.Contains(got, "serve --limit handshakes=N") {
		t.Fatalf("the 11th handshake answered %q; want a 429 naming handshakes", got)
	}
	if n := refusedIn(t, reg, "handshakes"); n != 1 {
		t.Fatalf("refused handshakes = %g, want 1", n)
	}
	_ = silent[0].Close()
	alice := tlsClient(t, addr, "127.0.0.3", clientTLS(t, dir, certs.ClientCert("alice"), certs.ClientKey("alice")))
	var last error
	if err := servertest.Eventually(10*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, last = alice.CreateSession(ctx, connect.NewRequest(&pb.CreateSessionRequest{TtlMs: 10000, Owner: "alice"}))
		return last == nil
	}); err != nil {
		t.Fatalf("alice, once a handshake place was free: %v", last)
	}
}

// TestLimitConnRatePerAddress: the connections one address opens are
// metered (conn-rate-per-address, burst conn-burst-per-address): past
// its burst a new connection is refused at accept with a 429 naming the
// limit, even with none of its connections open, while another address
// connects; the rate lets the address in again.
func TestLimitConnRatePerAddress(t *testing.T) {
	c, clk := startManual(t, withLimits(func(l *admission.Limits) { l.ConnRatePerAddress, l.ConnBurstPerAddress = 1, 3 }))
	// first reads what the node says to a new connection from src that
	// has sent nothing: "" when it waits for the request (admitted).
	first := func(src string) string {
		t.Helper()
		conn, err := dialerFrom(src).Dial("tcp", c.Addr)
		mustOK(t, "dial from "+src, err)
		defer func() { _ = conn.Close() }()
		_ = conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		b, _ := io.ReadAll(conn)
		return string(b)
	}
	for i := range 3 {
		if got := first("127.0.0.2"); got != "" {
			t.Fatalf("connection %d of the burst: %q, want admitted", i, got)
		}
	}
	got := first("127.0.0.2")
	if !strings.HasPrefix(got, "HTTP/1.1 429") || !strings.Contains(got, "serve --limit conn-rate-per-address=N") || !strings.Contains(got, "address 127.0.0.2") {
		t.Fatalf("connection past the burst: %q, want a 429 naming conn-rate-per-address and the address", got)
	}
	if n := refusedCount(t, c, "conn-rate-per-address"); n != 1 {
		t.Fatalf("leasehold_limit_refused_total{limit=\"conn-rate-per-address\"} = %d, want 1", n)
	}
	if got := first("127.0.0.3"); got != "" {
		t.Fatalf("another address: %q, want admitted", got)
	}
	clk.Advance(time.Second)
	if got := first("127.0.0.2"); got != "" {
		t.Fatalf("a second later: %q, want admitted", got)
	}
}
