// Package metrics is a node's Prometheus metrics: their definitions (names,
// labels, help texts, buckets), their registration on the Registerer the
// server is configured with (never the global one), and the spelling of
// results and codes as label values. docs/operating/monitoring.md and
// deploy/grafana/leasehold.json use these names; a change to one is a
// change to both.
//
// The server calls it at fixed points and reads nothing back:
//
//	RPC interceptor ──► rpc_total, rpc_duration_seconds, keepalive_streams
//	apply observer  ──► Observe: lock_events_total, kv_writes_total
//	raftnode        ──► LogAppend, FSMApply (raftnode.Metrics)
//	handlers        ──► ObserveApply, CountForward, CountKeepaliveMessage, SetLeader
//	scrape          ──► State: the applied state, Raft's progress, watchers, parked acquires
//
// Counters are updated on the caller's goroutine without a lock (the event
// counters are cached per type in atomic pointers); gauges of the state are
// read only at scrape time, through the State the server implements. The
// package imports internal/fsm (the applied results, the census) and api
// (the error codes), never the server, raftnode or raft: TestForbiddenImports
// in internal/harness/e2e pins that.
package metrics
