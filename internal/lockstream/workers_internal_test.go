package lockstream

import (
	"testing"
	"testing/synctest"
)

// A worker serves request after request; as many run as requests are in
// flight at once; of those that finish, maxIdleWorkers stay, and they exit
// when the server stops.
func TestWorkersReuseAndExit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stop := make(chan struct{})
		w := NewWorkers(stop)
		live := func(want int64, when string) {
			t.Helper()
			synctest.Wait()
			if n := w.live.Load(); n != want {
				t.Fatalf("%s: %d workers, want %d", when, n, want)
			}
		}
		for range 10 {
			ran := make(chan struct{})
			w.Run(func() { close(ran) })
			<-ran
			live(1, "requests one after another")
		}
		release := make(chan struct{})
		for range maxIdleWorkers + 50 {
			w.Run(func() { <-release })
		}
		live(maxIdleWorkers+50, "requests in flight")
		close(release)
		live(maxIdleWorkers, "after they ended")
		close(stop)
		live(0, "after the server stopped")
		ran := make(chan struct{})
		w.Run(func() { close(ran) }) // a late request still runs
		<-ran
		live(0, "after a request that came after the stop")
	})
}
