//go:build leasehold_sim

// Package sim is leasehold's deterministic cluster simulation (tier 1 of
// the fault suite). Three hashicorp/raft nodes run the real fsm.Machine and
// the real lessor on raft's in-memory stores and transport; a fault table
// in front of the transport partitions nodes, cuts one direction of a
// link or every link into a node, delays (and so reorders) and drops RPCs;
// the leader can hand its leadership over, cut off as it does; a node can
// crash and restart on its surviving stores; every node's lease clock runs
// at its own rate. Client goroutines call the nodes directly, as the server's
// handlers do. Everything runs inside a testing/synctest bubble, so a
// minute of cluster time takes a fraction of a second, and one seed fixes
// the fault schedule and the workload's choices.
//
//	clients ──► node (raft + fsm + lessor) ◄─ faultTransport ─► node ◄─► node
//	   │                      │ every applied entry
//	   ▼                      ▼
//	history ──► porcupine    per-replica checks (P2, P5, P6, P7)
//
// Run checks the properties of issue 11 that one process can: P1
// (porcupine: an expiring mutex per name and a fenced register per KV
// key), P2 and P6 (on every replica's stream of applied grants), P3 (a
// release with an older token of the same session is refused), P4 (the
// fenced resource keeps every acknowledged write), P5 (equal state hash at
// equal index, replays included), P7 (no session ends before its holder's
// own deadline while skew is within the drift bound), P8 (a leader and
// every name granted again after healing) and P9 (synctest fails a run
// that leaks a goroutine; -race finds races).
//
// Raft draws its election timeouts from a process-wide random source and
// the Go scheduler interleaves goroutines freely, so a seed replays its
// schedule and workload exactly, and its interleaving only approximately.
package sim
