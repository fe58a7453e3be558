package api

// LockStream capabilities. A server lists in the response header
// StreamOpsHeader (comma-separated) the operations it takes on the
// LockStream beyond the lock operations (Acquire, TryAcquire, Release,
// CancelWait); StreamOpsSession stands for CreateSession, KeepAlive and
// CloseSession. A client sends an operation that the stream of its server
// does not list as the unary RPC instead: an older server refuses a stream
// operation it does not know (invalid-argument), which changes nothing.
// StreamOpsBatch says the server takes several requests in one message
// (LockStreamRequest.batch, at most StreamBatchMax); a client sends each
// request in a message of its own to a server that does not list it.
const (
	StreamOpsHeader  = "Leasehold-Stream-Ops"
	StreamOpsSession = "session"
	StreamOpsBatch   = "batch"
)

// StreamBatchMax is the most requests one LockStream message may carry.
const StreamBatchMax = 64

// LeaderHeader is a response header of a follower: the API address of the
// leader it forwarded the request to (on a LockStream: the leader when the
// stream opened). A client that has the leader among its endpoints sends
// its next calls there, sparing every call the follower's hop.
const LeaderHeader = "Leasehold-Leader"
