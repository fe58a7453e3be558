package cutreply_test

import (
	"encoding/binary"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/harness/cutreply"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// h2c is an unencrypted HTTP/2 transport, closed when the test ends.
func h2c(t *testing.T) *http.Transport {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

func envelope(payload string) []byte {
	b := make([]byte, 5, 5+len(payload))
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

// echo answers each envelope of a bidirectional stream with the same
// envelope, as it arrives, and reports on ended when its request ends.
type echo struct{ ended chan struct{} }

func (e *echo) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer close(e.ended)
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	buf := make([]byte, 5)
	for {
		if _, err := io.ReadFull(r.Body, buf[:5]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(buf[1:5])
		payload := make([]byte, n)
		if _, err := io.ReadFull(r.Body, payload); err != nil {
			return
		}
		if _, err := w.Write(append(append([]byte(nil), buf[:5]...), payload...)); err != nil {
			return
		}
		w.(http.Flusher).Flush()
	}
}

// A bidirectional stream served through a reverse proxy (as tier 2's cut
// proxies serve the lock stream): the cut answer never reaches the
// caller, the caller's stream is reset while its request body is still
// open, and the upstream request is cancelled.
func TestServeStreamThroughReverseProxy(t *testing.T) {
	up := &echo{ended: make(chan struct{})}
	upstream := &url.URL{Scheme: "http", Host: servertest.Serve(t, up)}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(upstream) },
		Transport:     h2c(t),
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
	}
	proxy := servertest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cutreply.ServeStream(rp, w, r, func(payload []byte) bool { return string(payload) == "cut" })
	}))

	body, send := io.Pipe()
	defer send.Close()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+proxy+"/Stream", body)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		res *http.Response
		err error
	}
	resc := make(chan result, 1)
	go func() {
		res, err := (&http.Client{Transport: h2c(t)}).Do(req)
		resc <- result{res, err}
	}()
	if _, err := send.Write(envelope("one")); err != nil {
		t.Fatal(err)
	}
	var res *http.Response
	select {
	case r := <-resc:
		if r.err != nil {
			t.Fatal(r.err)
		}
		res = r.res
	case <-time.After(30 * time.Second):
		t.Fatal("no response headers through the proxy")
	}
	defer res.Body.Close()
	got := make([]byte, len(envelope("one")))
	if _, err := io.ReadFull(res.Body, got); err != nil || string(got[5:]) != "one" {
		t.Fatalf("first answer = %q, %v; want it passed through", got, err)
	}

	// The second answer is cut: the caller's read ends with an error (the
	// stream reset), though the caller's request body is still open.
	if _, err := send.Write(envelope("cut")); err != nil {
		t.Fatal(err)
	}
	type read struct {
		b   []byte
		err error
	}
	readc := make(chan read, 1)
	go func() {
		b, err := io.ReadAll(res.Body)
		readc <- read{b, err}
	}()
	select {
	case r := <-readc:
		if r.err == nil || len(r.b) > 0 {
			t.Fatalf("after the cut the caller read %q, %v; want nothing and the stream reset", r.b, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the caller's stream was not reset within 30 s of the cut")
	}
	select {
	case <-up.ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the upstream request did not end within 30 s of the cut")
	}
}
