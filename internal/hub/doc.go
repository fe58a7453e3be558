// Package hub fans the events a node applies out to its Watch streams and
// wakes the Acquire calls waiting in a queue. That is its one job: it keeps
// the bounded history of applied events, each watcher's cursor into it and
// the per-(name, lease) waiters; it decides nothing about locks and sends
// nothing on a stream.
//
// Only internal/server imports it (its Watch handler, its queued Acquire,
// its apply observer and restore hook, and the watcher gauge). The hub
// imports internal/fsm (the events) and api (the error codes its refusals
// carry), never the network, raft or the server: TestForbiddenImports in
// internal/harness/e2e pins that.
//
// # Design
//
// Publish and Restored run on raft's apply goroutine and never block; the
// streams and queued requests they wake take what is theirs afterwards:
//
//	raft apply goroutine            Watch handler         queued Acquire
//	  Publish / Restored ──► Hub.mu: history, watchers, waiters
//	                           │ one-slot wake-ups (coalesce)
//	                           ├──────────► Watcher.Wake ──► Next (copy out)
//	                           └──────────► Waiter.Wake  ──► read the state
//
// Nothing is dropped silently:
//
//   - every event goes into a bounded history (history.go); a watcher is a
//     cursor into it, so a Watch can start at a log index (replay, then
//     live, in one sequence: no gap, no duplicate);
//   - a watcher that falls more than half the history (New) behind the events
//     published since it registered is ended with resource-exhausted while
//     the events after the last one it sent are still held, so that it can
//     resume from there; a Watch from an index the history no longer holds,
//     or whose replay the history overtook, fails with compacted;
//   - when the node installs a snapshot (the events in between were never
//     applied here) the history is emptied and every watcher is ended with
//     compacted;
//   - a stream ended with compacted first sends the prefix's state at an
//     index (the server's watchstate.go), from which the caller resumes;
//   - a watcher is woken only by an event it will be sent (its prefix, at
//     or after its start); events of other prefixes that arrive while it
//     has taken everything move its cursor past them in Publish, without
//     waking it, so a lock event costs the watchers of other names no
//     goroutine wake-up and no scan. Such a watcher is still woken once
//     the log has moved progressEvery (64) entries past its last wake-up, so
//     the applied index its stream reports (progress notifications) stays
//     that close to the node's;
//   - a waiter is not sent events: it gets a coalescing wake-up whenever
//     an event concerns its (name, lease) — its own grant or withdrawal, or
//     another request of the same session that replaced it in the queue —
//     and reads the outcome of its wait id from the applied state, which is
//     the truth however many events happened in between.
//
// # Locking
//
// Hub.mu protects the history, every watcher's cursor and error, and the
// waiter sets. It is a leaf in the server's lock order (docs/locking.md):
// no other mutex is taken under it, and nothing blocks under it — the
// hub never sends on a stream (a Watch handler copies its events out with
// Next and sends without the lock), wake-ups are one-slot channel sends
// that never wait, and raft's applied index, read under it, must be an
// atomic load (SetRaftApplied). Every method takes Hub.mu itself; a
// caller may hold a mutex above it in that order, and the server's apply
// observer and restore hook call Publish and Restored after the state
// machine's write lock is released.
package hub
