// Package linz holds the porcupine models of leasehold's lock table and
// fenced KV, and the history types they read, for every test tier that
// checks linearizability (P1, and P4 at the built-in KV): the simulation
// (internal/harness/sim) and the real-process fault schedules (internal/harness/faults).
//
// LockModel is a mutex per name whose holder may expire at any moment the
// model needs it to (an expiry is invisible to clients), with tokens that
// only grow; an expired session never acts again. RegisterModel is a
// fenced register per key: a put with token t is accepted iff t is at
// least the last accepted token. An operation whose outcome the client did
// not learn (OutUnknown) may take effect at any time after its call, or
// never.
package linz
