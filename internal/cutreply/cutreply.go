// Package cutreply cuts HTTP/2 replies off after their headers, for tests
// of what a client reports when a request ran on the server but its answer
// never arrived (it must say outcome-unknown for a write, never internal).
package cutreply

import "net/http"

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
