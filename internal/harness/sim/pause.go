//go:build leasehold_sim

package sim

import "sync"

// pause is a node's process pause (SIGSTOP, a VM freeze, a long GC stall)
// at the boundaries the simulation controls: while paused, the node's
// raft sends nothing, its inbound RPCs queue, the answers to RPCs it sent
// before are held, its log and stable store accept no write, its state
// machine applies nothing, its lessor's timers do not fire, and client
// requests sent to it queue. On resume everything held goes on at once.
// raft's own timers keep running in the process, so a paused leader's
// main loop is also held in a log write (see node.freeze): without it, it
// would step down on its own, which a stopped process cannot.
type pause struct {
	mu      sync.Mutex    // protects resumed
	resumed chan struct{} // nil while running; closed on resume
}

// wait returns once the node is not paused. A nil pause never is.
func (p *pause) wait() {
	if p == nil {
		return
	}
	p.mu.Lock()
	ch := p.resumed
	p.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

func (p *pause) paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resumed != nil
}

func (p *pause) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resumed == nil {
		p.resumed = make(chan struct{})
	}
}

func (p *pause) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resumed != nil {
		close(p.resumed)
		p.resumed = nil
	}
}
