package httpedge_test

import (
	"net/http"
	"testing"

	"github.com/leasehold/leasehold/internal/harness/servertest"
	"github.com/leasehold/leasehold/internal/server"
)

// TestPprof checks that /debug/pprof/ is served only when Config.Pprof is
// set.
func TestPprof(t *testing.T) {
	for _, on := range []bool{false, true} {
		c := servertest.Start(t, servertest.Options{Configure: func(cfg *server.Config) { cfg.Pprof = on }})
		req, err := http.NewRequestWithContext(servertest.Ctx(t), http.MethodGet, c.URL+"/debug/pprof/cmdline", nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		want := http.StatusNotFound
		if on {
			want = http.StatusOK
		}
		if res.StatusCode != want {
			t.Errorf("Pprof=%v: GET /debug/pprof/cmdline = %d, want %d", on, res.StatusCode, want)
		}
	}
}
