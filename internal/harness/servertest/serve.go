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

// FreePorts returns n distinct ports that were free on 127.0.0.1 a moment
// ago. All n are held open until the last is chosen, so the kernel cannot
// hand the same port out twice (a cluster given one port for two of its
// addresses fails to bootstrap); another process may still take one before
// the caller binds it.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}
