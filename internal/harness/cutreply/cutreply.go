// Package cutreply cuts HTTP/2 replies off after their headers, for tests
// of what a client reports when a request ran on the server but its answer
// never arrived (it must say outcome-unknown for a write, never internal).
package cutreply

import (
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"sync"
)

// Serve serves r with h, but sends the caller only the response headers
// and the first 3 bytes of the body (an incomplete gRPC envelope), then
// resets the stream: the request runs to completion on h, and the rest of
// the answer never arrives. It does not return (it panics with
// http.ErrAbortHandler, which the server turns into a stream reset).
func Serve(h http.Handler, w http.ResponseWriter, r *http.Request) {
	h.ServeHTTP(&headersOnly{ResponseWriter: w}, r)
	panic(http.ErrAbortHandler)
}

// headersOnly sends the response headers at once, then the first 3 bytes
// of the body, and swallows the rest.
type headersOnly struct {
	http.ResponseWriter
	sent    bool
	partial bool
}

func (w *headersOnly) WriteHeader(code int) {
	if !w.sent {
		w.sent = true
		w.ResponseWriter.WriteHeader(code)
		w.ResponseWriter.(http.Flusher).Flush()
	}
}

func (w *headersOnly) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if !w.partial && len(b) >= 3 {
		w.partial = true
		_, _ = w.ResponseWriter.Write(b[:3])
		w.ResponseWriter.(http.Flusher).Flush()
	}
	return len(b), nil
}

func (w *headersOnly) Flush() {}

// ServeStream serves the gRPC stream r with h, passing its answers (gRPC
// envelopes) through until cut(payload) returns true for one: that answer
// is swallowed, h's request context is canceled, its request body is
// closed, and the stream is reset. The request behind that answer ran on
// the server; the caller never learns its outcome, nor that of any other
// request still in flight on the stream. When no answer is cut,
// ServeStream returns once h does.
//
// h may be the API's own handler or a reverse proxy in front of it
// (httputil.ReverseProxy over an HTTP/2 transport). The proxy's transport
// copies the request body upstream in a goroutine that blocks reading it
// and looks at the request's context only between reads; its response
// body is broken only when that copy ends. While the caller waits for
// answers and sends nothing, cancelling alone would leave the proxy (and
// the caller) waiting forever: closing the request body ends the copy, so
// the transport resets the upstream stream and the proxy returns.
func ServeStream(h http.Handler, w http.ResponseWriter, r *http.Request, cut func(payload []byte) bool) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	cw := &envelopeCutter{ResponseWriter: w, cut: cut, cancel: cancel, body: r.Body}
	h.ServeHTTP(cw, r.WithContext(ctx))
	cw.mu.Lock()
	done := cw.cutDone
	cw.mu.Unlock()
	if done {
		panic(http.ErrAbortHandler) // reset the stream: no trailers, no status
	}
}

// envelopeCutter passes a stream's gRPC envelopes through until cut
// chooses one: that one is swallowed and the stream ends.
type envelopeCutter struct {
	http.ResponseWriter
	cut    func([]byte) bool
	cancel context.CancelFunc
	body   io.Closer // the request body, closed at the cut

	mu      sync.Mutex // protects following
	buf     []byte     // the start of an envelope not yet complete
	cutDone bool
}

func (w *envelopeCutter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cutDone {
		return len(b), nil
	}
	w.buf = append(w.buf, b...)
	for len(w.buf) >= 5 {
		n := int(binary.BigEndian.Uint32(w.buf[1:5]))
		if len(w.buf) < 5+n {
			break
		}
		env := w.buf[:5+n]
		if w.cut(env[5:]) {
			w.cutDone = true
			w.buf = nil
			w.cancel() // ends the handler, which answers nothing more
			_ = w.body.Close()
			return len(b), nil
		}
		if _, err := w.ResponseWriter.Write(env); err != nil {
			return 0, err
		}
		w.buf = w.buf[5+n:]
	}
	return len(b), nil
}

func (w *envelopeCutter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.cutDone {
		w.ResponseWriter.(http.Flusher).Flush()
	}
}
