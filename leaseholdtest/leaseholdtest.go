// Package leaseholdtest runs a leasehold server inside a Go process, for
// tests and examples of code that uses the client, as net/http/httptest
// does for HTTP servers: a single node on a 127.0.0.1 port with a
// temporary data dir, which Close removes.
//
//	srv, err := leaseholdtest.NewServer()
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer srv.Close()
//	c, err := client.Dial(ctx, srv.Addr)
//
// It is the real server (the same Raft log, lessor and fencing), with
// timings short enough for tests: it leads within tens of milliseconds
// of NewServer, and sessions and lock-delays behave as in production.
// Everything it stores is gone after Close; for anything that must
// survive, run `leasehold serve`.
package leaseholdtest

import (
	"io"
	"log/slog"
	"os"

	"github.com/leasehold/leasehold/internal/server"
	"github.com/leasehold/leasehold/internal/testserver"
)

// Server is a running single-node leasehold server.
type Server struct {
	// Addr is the API address, host:port, to pass to client.Dial.
	Addr string

	ts  *testserver.Server
	dir string
}

// Option changes how NewServer configures the server.
type Option func(*options)

type options struct {
	logger       *slog.Logger
	watchHistory int
}

// WithLogger sends the server's log to l (default: discarded).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithWatchHistory keeps n events for Watch with FromIndex (default
// 10,000, as `leasehold serve`), so that a test can see a history that no
// longer holds an index (client.ErrCompacted, client.OnCompacted).
func WithWatchHistory(n int) Option { return func(o *options) { o.watchHistory = n } }

// NewServer starts a server and returns once it leads.
func NewServer(opts ...Option) (*Server, error) {
	o := options{logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, f := range opts {
		f(&o)
	}
	dir, err := os.MkdirTemp("", "leaseholdtest-")
	if err != nil {
		return nil, err
	}
	ts, err := testserver.Open(dir, o.logger, func(c *server.Config) {
		if o.watchHistory > 0 {
			c.WatchHistory = o.watchHistory
		}
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return &Server{Addr: ts.Addr, ts: ts, dir: dir}, nil
}

// Dir is the server's temporary data dir, which Close removes.
func (s *Server) Dir() string { return s.dir }

// Close stops the server and removes its data.
func (s *Server) Close() error {
	err := s.ts.Stop()
	if rerr := os.RemoveAll(s.dir); err == nil {
		err = rerr
	}
	return err
}
