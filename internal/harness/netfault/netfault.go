// Package netfault is a userspace TCP proxy for fault tests: it forwards
// connections to a target until the test stalls it (connections stay open,
// nothing passes either way, as with a process stopped by SIGSTOP or a
// network that drops every packet) or cuts it (every connection is closed
// and new ones are refused).
package netfault

import (
	"errors"
	"io"
	"net"
	"sync"
)

// Proxy forwards TCP connections from Addr to a target. Its methods are
// safe for concurrent use.
type Proxy struct {
	target string

	mu      sync.Mutex // protects following
	ln      net.Listener
	stalled bool
	resume  chan struct{} // closed while traffic flows
	conns   map[net.Conn]struct{}
	closed  bool

	wg sync.WaitGroup // the accept loop and the copiers
}

// New starts a proxy on a free 127.0.0.1 port in front of target.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, resume: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.resume)
	p.wg.Go(func() { p.accept(ln) })
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept(ln net.Listener) {
	for {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			in.Close()
			out.Close()
			return
		}
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(out, in) })
		p.wg.Go(func() { p.pipe(in, out) })
	}
}

// pipe copies src to dst, holding each chunk while the proxy is stalled.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.forget(src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			resume := p.resume
			p.mu.Unlock()
			<-resume
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if tc, ok := dst.(*net.TCPConn); ok && errors.Is(err, io.EOF) {
				_ = tc.CloseWrite()
			}
			return
		}
	}
}

func (p *Proxy) forget(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

// Stall stops all traffic; connections stay open and new ones are
// accepted, but no byte passes until Resume.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stalled && !p.closed {
		p.stalled = true
		p.resume = make(chan struct{})
	}
}

// Resume lets traffic flow again after Stall.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled {
		p.stalled = false
		close(p.resume)
	}
}

// Close cuts every connection, refuses new ones and waits for the proxy's
// goroutines. It is idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	if p.stalled {
		p.stalled = false
		close(p.resume)
	}
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	_ = p.ln.Close()
	for c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
}
