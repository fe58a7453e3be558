package servertest

import (
	"net"
	"net/http"
	"testing"

	"github.com/leasehold/leasehold/internal/server"
)

// Serve serves h as the API is served (HTTP/1 and unencrypted HTTP/2) on
// a free 127.0.0.1 port and returns its address; the server is closed,
// and waited for, when the test ends.
func Serve(t testing.TB, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := server.NewHTTPServer(h)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = hs.Close()
		<-done
	})
	return ln.Addr().String()
}
