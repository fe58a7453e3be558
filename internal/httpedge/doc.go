// Package httpedge is the HTTP side of a node's API port, apart from the
// RPC handlers and authorization: what the listener speaks, what wraps
// every request, and the plain HTTP endpoints served beside the RPCs.
//
//	listener   Serve: TLS only when configured, HTTP/2 and HTTP/1.1 by ALPN
//	           (APITLSConfig); PeerClient and PeerBaseURL for calls to other nodes
//	middleware AccessLog (one line per request; NoteCode adds an RPC's code),
//	           BrowserCheck (with auth off, refuse other sites' pages)
//	endpoints  GET /v1/token-counter (TokenCounter), /healthz, /readyz,
//	           grpc.health.v1 and server reflection (MountProbes),
//	           /debug/pprof/ (MountPprof)
//
// It knows nothing of raft, the replicated state or the handlers: the
// server hands it what it needs as small interfaces (TokenNode, Prober)
// and values (BrowserCheckConfig).
package httpedge
