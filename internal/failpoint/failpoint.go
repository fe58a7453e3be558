// Package failpoint names the points where a test build of leasehold can
// crash itself, to prove that a process killed at the worst moment loses
// nothing it acknowledged.
//
// A normal build has no failpoint: Inject is an empty function the
// compiler inlines away. A binary built with -tags leasehold_failpoints
// reads LEASEHOLD_FAILPOINT once, at start:
//
//	LEASEHOLD_FAILPOINT=POINT:N[:ROLE]
//
// crashes the process at the Nth time (N ≥ 1) it reaches POINT; ROLE,
// leader or follower, counts only the times it reaches POINT in that
// role. The crash is a SIGKILL the process sends itself, as kill -9
// would: no deferred call runs, no buffer is flushed. Just before it, the
// process writes one line to stderr:
//
//	leasehold: failpoint POINT reached (hit N): SIGKILL
//
// A spec that does not parse ends the process at start with exit code 2.
package failpoint

// Point is a place in the server where a crash can be injected.
type Point uint8

// The points, in the order an entry passes them.
const (
	// LogAppendBefore: raft is about to append entries to the log store.
	LogAppendBefore Point = iota
	// LogAppendAfter: the log store appended (and synced) entries.
	LogAppendAfter
	// FSMApplyBefore: a committed entry is about to be applied.
	FSMApplyBefore
	// FSMApplyAfter: a committed entry was applied, before raft hears so.
	FSMApplyAfter
	// SnapshotPersistBefore: a snapshot is about to be written.
	SnapshotPersistBefore
	// SnapshotPersistAfter: a snapshot was written and synced, before raft
	// compacts the log behind it.
	SnapshotPersistAfter
	// CommitReply: a client's command was committed and applied, before
	// the reply is sent.
	CommitReply

	numPoints
)

var names = [numPoints]string{
	LogAppendBefore:       "log-append-before",
	LogAppendAfter:        "log-append-after",
	FSMApplyBefore:        "fsm-apply-before",
	FSMApplyAfter:         "fsm-apply-after",
	SnapshotPersistBefore: "snapshot-persist-before",
	SnapshotPersistAfter:  "snapshot-persist-after",
	CommitReply:           "commit-reply",
}

func (p Point) String() string {
	if p < numPoints {
		return names[p]
	}
	return "unknown"
}

// Points lists every point.
func Points() []Point {
	out := make([]Point, numPoints)
	for i := range out {
		out[i] = Point(i)
	}
	return out
}

// Env is the variable a failpoint build reads at start.
const Env = "LEASEHOLD_FAILPOINT"
