package client_test

import (
	"context"
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/certs"
	"github.com/leasehold/leasehold/internal/server"
)

// pki is a CA directory with a node certificate for 127.0.0.1 and client certificates.
type pki struct{ dir string }

func newPKI(t *testing.T, o certs.Options) pki {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	for _, err := range []error{certs.CreateCA(o), certs.CreateNode(o, []string{"127.0.0.1", "localhost"}), certs.CreateClient(o, "alice")} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return pki{dir: o.Dir}
}

func (p pki) path(f string) string { return filepath.Join(p.dir, f) }

func (p pki) server(t *testing.T, mtls bool) func(*server.Config) {
	t.Helper()
	clientCA := ""
	if mtls {
		clientCA = p.path(certs.CACert)
	}
	cfg, err := certs.ServerConfig(p.path(certs.NodeCert), p.path(certs.NodeKey), clientCA)
	if err != nil {
		t.Fatal(err)
	}
	return func(c *server.Config) { c.TLS = cfg }
}

func (p pki) client(t *testing.T, name string) *tls.Config {
	t.Helper()
	cert, key := "", ""
	if name != "" {
		cert, key = p.path(certs.ClientCert(name)), p.path(certs.ClientKey(name))
	}
	cfg, err := certs.ClientConfig(p.path(certs.CACert), cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// tryDial dials endpoints and makes a first call (Dial itself sends nothing),
// returning the first error.
func tryDial(t *testing.T, endpoints string, opts ...client.DialOption) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, endpoints, append(opts, client.WithRetryTimeout(time.Second))...)
	if err != nil {
		return err
	}
	defer c.Close()
	_, _, err = c.List(ctx, "", client.Stale())
	return err
}

func TestTLS(t *testing.T) {
	p := newPKI(t, certs.Options{})
	ts := startServer(t, p.server(t, true))

	// A client that verifies the server and presents its certificate works end to end.
	c := dial(t, ts.Addr, client.WithTLS(p.client(t, "alice")))
	s := newSession(t, c)
	l, err := s.Acquire(testCtx(t), "tls:lock")
	if err != nil || l.Token() == 0 {
		t.Fatalf("acquire over TLS: %v", err)
	}
	// An explicit https:// endpoint works too.
	if err := tryDial(t, "https://"+ts.Addr, client.WithTLS(p.client(t, "alice"))); err != nil {
		t.Fatalf("https:// endpoint: %v", err)
	}

	other := newPKI(t, certs.Options{})
	expiredClient := p.client(t, "")
	if err := certs.CreateClient(certs.Options{Dir: p.dir, Lifetime: time.Hour, Now: func() time.Time { return time.Now().Add(-3 * time.Hour) }}, "old"); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(p.path(certs.ClientCert("old")), p.path(certs.ClientKey("old")))
	if err != nil {
		t.Fatal(err)
	}
	expiredClient.Certificates = []tls.Certificate{pair}
	for _, tc := range []struct {
		name     string
		endpoint string
		opts     []client.DialOption
		want     string // in the error
	}{
		{"plaintext client", ts.Addr, nil, "TLS"},
		{"client trusting another CA", ts.Addr, []client.DialOption{client.WithTLS(other.client(t, "alice"))}, "certificate signed by unknown authority"},
		{"no client certificate", ts.Addr, []client.DialOption{client.WithTLS(p.client(t, ""))}, "certificate"},
		{"client certificate of another CA", ts.Addr, []client.DialOption{client.WithTLS(withCert(p.client(t, ""), other, "alice"))}, "certificate"},
		{"expired client certificate", ts.Addr, []client.DialOption{client.WithTLS(expiredClient)}, "is valid from"},
		{"http:// endpoint with TLS", "http://" + ts.Addr, []client.DialOption{client.WithTLS(p.client(t, "alice"))}, "is http:// but TLS is configured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tryDial(t, tc.endpoint, tc.opts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Dial = %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

// A server whose certificate has expired is refused by the client.
func TestTLSExpiredServer(t *testing.T) {
	p := newPKI(t, certs.Options{})
	old := certs.Options{Dir: p.dir, Overwrite: true, Lifetime: time.Hour, Now: func() time.Time { return time.Now().Add(-3 * time.Hour) }}
	if err := certs.CreateNode(old, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, p.server(t, false))
	err := tryDial(t, ts.Addr, client.WithTLS(p.client(t, "")))
	if err == nil || !strings.Contains(err.Error(), "certificate has expired") {
		t.Fatalf("Dial = %v; want certificate has expired", err)
	}
}

func withCert(cfg *tls.Config, p pki, name string) *tls.Config {
	pair, err := tls.LoadX509KeyPair(p.path(certs.ClientCert(name)), p.path(certs.ClientKey(name)))
	if err != nil {
		panic(err)
	}
	cfg.Certificates = []tls.Certificate{pair}
	return cfg
}

// TestTLSSchemelessEndpointRenews: with WithTLS a host:port endpoint means
// TLS for the keepalive stream as for unary calls, so a session and its
// lock outlive several TTLs.
func TestTLSSchemelessEndpointRenews(t *testing.T) {
	p := newPKI(t, certs.Options{})
	ts := startServer(t, p.server(t, true))
	c := dial(t, ts.Addr, client.WithTLS(p.client(t, "alice")))
	const ttl = time.Second
	s := newSession(t, c, client.WithTTL(ttl))
	l, err := s.Acquire(testCtx(t), "tls:renewed")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
		t.Fatalf("the session ended within 4 TTLs: %v", s.Err())
	case <-l.Done():
		t.Fatal("the lock was lost within 4 TTLs")
	case <-time.After(4 * ttl):
	}
	st, err := c.Status(testCtx(t), "tls:renewed")
	if err != nil || st.GetHolder().GetToken() != l.Token() {
		t.Fatalf("after 4 TTLs: %+v, %v; want held with token %d", st, err, l.Token())
	}
}
