package main

import (
	"context"
	"io"
	"net"
	"sync"
	"time"
)

// holdConn keeps one idle HTTP/2 connection (preface and SETTINGS sent,
// nothing more) open until ctx ends, dialling again when the node closes it.
func holdConn(ctx context.Context, e *env, c *counters, opened func()) {
	d := e.dialer()
	once := sync.OnceFunc(opened)
	defer once()
	for ctx.Err() == nil {
		conn, err := d.DialContext(ctx, "tcp", e.addr)
		once()
		if err != nil {
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		c.sent.Add(1)
		stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
		_, _ = conn.Write(h2Preface)
		buf := make([]byte, 512)
		n, _ := io.ReadAtLeast(conn, buf, 12)
		c.answer(connCode(buf[:n]))
		_, _ = io.Copy(io.Discard, conn) // until the node or ctx closes it
		stop()
		_ = conn.Close()
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// (b) many idle connections: twice the node's conns limit, opened before
// the window, held (and re-opened when closed) through it.
func floodConnsIdle(ctx context.Context, e *env, c *counters, start func() context.Context) error {
	n := 2 * e.conns
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var opened sync.WaitGroup
	opened.Add(n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { holdConn(fctx, e, c, opened.Done) })
	}
	ready := make(chan struct{})
	go func() { opened.Wait(); close(ready) }()
	select { // every first dial returned (bounded: 15 s)
	case <-ready:
	case <-time.After(15 * time.Second):
	}
	w := start()
	<-w.Done()
	cancel()
	wg.Wait()
	return nil
}

// (b) dial/close loops: each connection sends the HTTP/2 preface, reads
// the node's first bytes and is reset.
func floodConnsChurn(ctx context.Context, e *env, c *counters, start func() context.Context) error {
	g := 64
	if !e.short {
		g = 512
	}
	w := start()
	var wg sync.WaitGroup
	for range g {
		wg.Go(func() {
			d := e.dialer()
			buf := make([]byte, 512)
			for w.Err() == nil {
				conn, err := d.DialContext(w, "tcp", e.addr)
				if err != nil {
					sleepCtx(w, 10*time.Millisecond)
					continue
				}
				c.sent.Add(1)
				_, _ = conn.Write(h2Preface)
				_ = conn.SetReadDeadline(time.Now().Add(time.Second))
				n, _ := io.ReadAtLeast(conn, buf, 12)
				c.answer(connCode(buf[:n]))
				if tc, ok := conn.(*net.TCPConn); ok {
					_ = tc.SetLinger(0) // reset: no TIME_WAIT to run out of ports
				}
				_ = conn.Close()
			}
		})
	}
	wg.Wait()
	return nil
}
