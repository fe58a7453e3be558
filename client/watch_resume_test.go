package client_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// resumeHangs serves the real API, but ends the first Watch stream when
// end is closed and holds every later Watch until its caller gives up: a
// watch whose resumption is cut off by the caller.
type resumeHangs struct {
	h       http.Handler
	watches atomic.Int32
	end     chan struct{}
}

func (f *resumeHangs) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/Watch") {
		f.h.ServeHTTP(w, r)
		return
	}
	if f.watches.Add(1) > 1 {
		<-r.Context().Done()
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() { // ends with this request
		select {
		case <-f.end:
			cancel()
		case <-ctx.Done():
		}
	}()
	f.h.ServeHTTP(w, r.WithContext(ctx))
}

// A watch whose stream ended and whose resumption the caller cancels ends
// quietly: no panic closing a stream that was never opened.
func TestWatchCancelledWhileResuming(t *testing.T) {
	ts := startServer(t)
	f := &resumeHangs{h: ts.Server().Handler(), end: make(chan struct{})}
	c := dial(t, serveHandler(t, f))
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	events, err := c.Watch(ctx, "resume/")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { // ends when the iteration does
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("panic: %v", p)
			}
		}()
		for _, err := range events {
			if err != nil {
				break
			}
		}
		done <- nil
	}()
	close(f.end)
	eventually(t, 10*time.Second, "the watch to resume", func() bool { return f.watches.Load() >= 2 })
	cancel()
	if err := recv(t, done, 10*time.Second, "the watch to end"); err != nil {
		t.Fatal(err)
	}
}
