package lockstream

import "sync/atomic"

// Workers runs the requests of every lock stream on goroutines that outlive
// one request, so that the stack a goroutine grew running one request (the
// handler chain down to the raft proposal is deep) serves the next ones: a
// fresh goroutine per message grew its stack from the start size every
// time, which was a tenth of the server's CPU at 64 concurrent lock
// operations (runtime.newstack and copystack). As many workers run as
// requests are in flight; of those that finish, up to maxIdleWorkers wait
// for the next request and the others exit. Idle workers exit when the
// server closes (the stop channel of NewWorkers). Run never waits for a
// worker.
type Workers struct {
	work chan func()
	stop <-chan struct{}
	idle atomic.Int64 // workers waiting for a request
	live atomic.Int64 // workers running or idle
}

// maxIdleWorkers bounds the workers kept waiting for a request.
const maxIdleWorkers = 256

// NewWorkers returns the workers of a server; idle ones exit once stop is
// closed.
func NewWorkers(stop <-chan struct{}) *Workers {
	return &Workers{work: make(chan func()), stop: stop}
}

// Run runs f on an idle worker, or on a new one when none is idle.
func (w *Workers) Run(f func()) {
	select {
	case w.work <- f:
	default:
		go w.loop(f)
	}
}

func (w *Workers) loop(f func()) {
	w.live.Add(1)
	defer w.live.Add(-1)
	for {
		f()
		if w.idle.Add(1) > maxIdleWorkers {
			w.idle.Add(-1)
			return
		}
		select {
		case f = <-w.work:
			w.idle.Add(-1)
		case <-w.stop:
			w.idle.Add(-1)
			return
		}
	}
}
