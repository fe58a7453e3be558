package api

// LockStream capabilities. A server lists in the response header
// StreamOpsHeader (comma-separated) the operations it takes on the
// LockStream beyond the lock operations (Acquire, TryAcquire, Release,
// CancelWait); StreamOpsSession stands for CreateSession, KeepAlive and
// CloseSession. A client sends an operation that the stream of its server
// does not list as the unary RPC instead: an older server refuses a stream
// operation it does not know (invalid-argument), which changes nothing.
const (
	StreamOpsHeader  = "Leasehold-Stream-Ops"
	StreamOpsSession = "session"
)
