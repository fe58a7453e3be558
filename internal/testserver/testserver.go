// Package testserver runs a single-node leasehold server in the calling
// process, on a 127.0.0.1 port, with timings short enough for tests (an
// election in tens of milliseconds). The public leaseholdtest package and
// the client's own tests are built on it.
package testserver

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/server"
)

// Server is a running single-node server.
type Server struct {
	// Addr is the server's API address, host:port.
	Addr string

	srv       *server.Server
	stopServe context.CancelFunc
	served    chan error
	once      sync.Once
	stopErr   error
}

// Open starts a server on the data dir dir, edited by configure, and
// waits until it leads (at most 10 s).
func Open(dir string, logger *slog.Logger, configure ...func(*server.Config)) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	cfg := server.DefaultConfig(dir, ln.Addr().String())
	cfg.Logger = logger
	cfg.Raft.HeartbeatTimeout = 50 * time.Millisecond
	cfg.Raft.ElectionTimeout = 50 * time.Millisecond
	cfg.Raft.LeaderLeaseTimeout = 50 * time.Millisecond
	cfg.Raft.CommitTimeout = 5 * time.Millisecond
	cfg.Lessor.Grace = cfg.Raft.LeaderLeaseTimeout
	for _, f := range configure {
		f(&cfg)
	}
	srv, err := server.Open(cfg)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{Addr: ln.Addr().String(), srv: srv, stopServe: cancel, served: make(chan error, 1)}
	go func() { s.served <- srv.Serve(ctx, ln) }()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := srv.WaitLeader(wctx); err != nil {
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

// Server is the server itself.
func (s *Server) Server() *server.Server { return s.srv }

// Stop stops serving and closes the server; its data dir stays. Every
// call returns the first call's error.
func (s *Server) Stop() error {
	s.once.Do(func() {
		s.stopServe()
		s.stopErr = errors.Join(<-s.served, s.srv.Close())
	})
	return s.stopErr
}
