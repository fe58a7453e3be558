//go:build leasehold_failpoints

package failpoint

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
)

// Enabled reports whether this build has failpoints.
const Enabled = true

// armed is the point LEASEHOLD_FAILPOINT names; set once in init, read only
// afterwards.
var armed struct {
	on    bool
	point Point
	at    int64
	role  string // "", "leader" or "follower"
}

var (
	hits    atomic.Int64 // times the armed point was reached (in its role)
	leading atomic.Bool  // whether this node leads, as raft last notified
)

func init() {
	v := os.Getenv(Env)
	if v == "" {
		return
	}
	p, at, role, err := Parse(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "leasehold: %s=%q: %v\n", Env, v, err)
		os.Exit(2)
	}
	armed.on, armed.point, armed.at, armed.role = true, p, at, role
	fmt.Fprintf(os.Stderr, "leasehold: failpoint %s armed at hit %d%s\n", p, at, roleSuffix(role))
}

func roleSuffix(role string) string {
	if role == "" {
		return ""
	}
	return " as " + role
}

// Leading records whether this node leads; a point armed for a role
// counts only the hits in that role.
func Leading(leader bool) { leading.Store(leader) }

// Inject counts a hit of p and kills the process with SIGKILL at the
// armed hit.
func Inject(p Point) {
	if !armed.on || p != armed.point {
		return
	}
	switch armed.role {
	case "leader":
		if !leading.Load() {
			return
		}
	case "follower":
		if leading.Load() {
			return
		}
	}
	n := hits.Add(1)
	if n != armed.at {
		return
	}
	// os.Stderr is unbuffered: the line is out before the signal.
	fmt.Fprintf(os.Stderr, "leasehold: failpoint %s reached (hit %d): SIGKILL\n", p, n)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is delivered; nothing after the point runs
}
