package client_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/certs"
	"github.com/leasehold/leasehold/internal/server"
)

// TestMisconfigurationFailsFast: a connection mistake (plaintext at a TLS
// port and the reverse, an untrusted server, no client certificate, a
// port that is not leasehold's API) fails within a second, not after the
// retry timeout, as unavailable with the cause named — for a write too,
// which must not say outcome-unknown when nothing reached a server.
func TestMisconfigurationFailsFast(t *testing.T) {
	p := newPKI(t, certs.Options{})
	mtls := startServer(t, p.server(t, true))
	plain := startServer(t)
	other := newPKI(t, certs.Options{})
	notFound := httptest.NewServer(http.NotFoundHandler()) // an HTTP/1.1 server that is not leasehold
	defer notFound.Close()
	http1 := listenHTTP1(t) // a port that answers HTTP/1.1 to anything

	for _, tc := range []struct {
		name     string
		endpoint string
		opts     []client.DialOption
		want     string
	}{
		{"plaintext client at a TLS port", mtls.Addr, nil, "the server speaks TLS"},
		{"TLS client at a plaintext port", plain.Addr, []client.DialOption{client.WithTLS(p.client(t, "alice"))}, "plain HTTP, not https"},
		{"server of another CA", mtls.Addr, []client.DialOption{client.WithTLS(other.client(t, "alice"))}, "not trusted here"},
		{"no client certificate", mtls.Addr, []client.DialOption{client.WithTLS(p.client(t, ""))}, "requires a client certificate"},
		{"an HTTP server that is not leasehold", strings.TrimPrefix(notFound.URL, "http://"), nil, "does not speak leasehold's API"},
		{"a port that speaks HTTP/1.1", http1, nil, "does not speak leasehold's API"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := client.Dial(ctx, tc.endpoint, tc.opts...) // the default retry timeout: 10 s
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for op, call := range map[string]func() error{
				"list":   func() error { _, _, err := c.List(ctx, ""); return err },
				"kv put": func() error { return c.KVPut(ctx, "k", []byte("v"), 1, false) },
				"create session": func() error {
					s, err := c.NewSession(ctx)
					if err == nil {
						s.Orphan()
					}
					return err
				},
			} {
				start := time.Now()
				err := call()
				took := time.Since(start)
				if code := api.CodeOf(err); code != api.CodeUnavailable {
					t.Errorf("%s: %v (code %s); want unavailable", op, err, code)
				}
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s: %v; want the cause %q", op, err, tc.want)
				}
				if took > time.Second {
					t.Errorf("%s took %v; want under 1 s (%v)", op, took, err)
				}
			}
		})
	}
}

// listenHTTP1 is a TCP port that answers every connection with an
// HTTP/1.1 error and closes it, as a proxy or another service would.
func listenHTTP1(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 1024)
			_, _ = conn.Read(buf)
			_, _ = conn.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
			_ = conn.Close()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return ln.Addr().String()
}

// TestConnectionLimitIsNotAMisconfiguration: a node at its connection
// limit answers a new connection with an HTTP/1.1 429 that names the limit
// and closes it. The client reports that refusal, resource-exhausted with
// the node's message, not a port that does not speak leasehold's API.
func TestConnectionLimitIsNotAMisconfiguration(t *testing.T) {
	ts := startServer(t, func(cfg *server.Config) { cfg.Limits.Conns = 1 })
	hold, err := net.Dial("tcp", ts.Addr) // takes the node's one connection
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	time.Sleep(100 * time.Millisecond) // the node accepts it
	c, err := client.Dial(context.Background(), ts.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = c.Status(ctx, "x")
	if api.CodeOf(err) != api.CodeResourceExhausted || !strings.Contains(err.Error(), "connections are open on this node") || strings.Contains(err.Error(), "does not speak") {
		t.Fatalf("status at the connection limit: %v (code %s), want resource-exhausted naming the limit", err, api.CodeOf(err))
	}
}
