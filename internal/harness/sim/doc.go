//go:build leasehold_sim

// Package sim is leasehold's deterministic cluster simulation (tier 1 of
// the fault suite). Three nodes run leasehold's own node code: each is a
// raftnode.Node (Open, Apply, ReadIndex and Read, the leadership watch with
// its barrier and token floor, ConfirmLeadership) on in-memory log, stable
// and snapshot stores given through raftnode.Config.Stores, with the real
// lessor wired as the server wires it (internal/server's LessorPropose,
// ConfirmForLessor and PromoteLessor; Demote on a lost leadership; Observe
// on every applied entry). Clients call what the server's handlers call:
// raftnode.Node.Apply for commands, ReadIndex then Read for linearizable
// reads, server.RenewLeases for keepalives (as a KeepAliveStream message),
// RenewCommitted after a CreateSession.
//
// A fault table in front of raft's in-memory transport partitions nodes,
// cuts one direction of a link or every link into a node, delays (and so
// reorders) and drops RPCs; the leader can hand its leadership over, cut
// off as it does; a node can crash and restart on its surviving stores; a
// node's process can pause (SIGSTOP, a VM freeze, a GC stall) for longer
// than the shortest TTL plus two election timeouts and resume, with its
// inbound RPCs and the client requests sent to it queued meanwhile (see
// pause); every node's lease clock runs at its own rate. Everything runs
// inside a testing/synctest bubble, so a minute of cluster time takes a
// fraction of a second, and one seed fixes the fault schedule and the
// workload's choices.
//
//	clients ──► node (raftnode.Node + lessor) ◄─ faultTransport ─► node ◄─► node
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
// own deadline, computed as the Go client does from the send time of its
// last acknowledged renewal, while skew is within the drift bound), P8 (a
// leader and every name granted again after healing) and P9 (synctest
// fails a run that leaks a goroutine; -race finds races). W5 (modes.go)
// adds two rules of a session's standing on a name: P12, modes never mix
// (a grant is in the mode asked for, a session holding a name one way is
// refused the other, and no replica ever has a writer beside readers) and
// P13, a withdrawal withdraws only what its request created (a cut-off
// re-entrant acquire's withdrawal leaves the holding the session learned;
// a retry under the request's own wait id withdraws its unlearned grant).
//
// Raft draws its election timeouts from a process-wide random source and
// the Go scheduler interleaves goroutines freely, so a seed replays its
// schedule and workload exactly, and its interleaving only approximately.
package sim
