// Package admission decides what one node admits from its clients: the
// limits of `leasehold serve --limit` (Limits, DefaultLimits, LimitNames),
// and the Limiter that enforces them at the API edge, refusing what is
// past a limit with resource-exhausted (Exhausted) and counting it in
// leasehold_limit_refused_total.
//
//	accept ──► Listen: conns, conn-rate-per-address, conns-per-address, handshakes,
//	           conns-per-principal (connlimit.go)
//	request ─► Handler: rate per principal, request-bytes, read-timeout, fair shares of
//	           the node's CPU per principal (limiter.go, bodycap.go, shares.go)
//	call ────► streams (gates), cost meters (watch events paced), parked Acquires, one wait
//	           per session and name, sessions per principal
//	           (limiter.go, meter.go, queuecap.go, sessions.go)
//
// Its one job is admission: it knows nothing of the replicated state, of
// raft or of the RPC handlers, which call it (the lease ids of a
// CreateSession, the sessions that ended) with plain values. Only
// internal/server (the glue) and cmd/leasehold (parsing Limits) import
// it.
//
// Locking: every mutex here (Limiter.mu, gate.mu, meter.mu,
// parkedAcquires.mu, connGate.mu, shares.mu) is a leaf: none is held while another
// is taken, nor while calling out of the package (except to the ended
// callback of ReserveSession, which reads the state under its own read
// lock), nor while waiting on the network. See docs/locking.md.
package admission
