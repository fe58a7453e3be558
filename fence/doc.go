// Package fence makes a resource refuse writes from a lock holder that has lost its lock.
//
// A lease cannot stop a holder that paused (GC, VM freeze, partition) from writing after its
// lease ran out. Only the resource can: every grant carries a fencing token, a uint64 that
// grows with every grant, and the resource remembers the last token it accepted per key and
// refuses anything older. This package is that check, for the stores people already run.
//
// # Invariant
//
// For every key k and token t (t > 0):
//
//	Monotonic (default): a write with t is accepted iff t >= last(k)   (a holder may write many times)
//	Strict:              a write with t is accepted iff t >  last(k)   (one effect per generation)
//
// and on acceptance last(k) becomes t. Two properties make this a fence rather than advice:
//
//  1. The check, the effect and the update of last(k) are ONE atomic step. A stale and a fresh
//     writer that race can never both pass the check against the same last(k) and then both
//     apply their effect: each guard documents the exact SQL or script that makes it so.
//  2. A rejection is a distinct result — an error matching [ErrStaleToken] that carries the
//     last accepted token ([*StaleTokenError]) — never a silent drop and never a success.
//
// # Pieces
//
//	                  token t, key k, effect
//	caller ───────────────────────────────────▶ Guard ──▶ store: check t vs last(k), effect, last(k)=t
//	                                                       └─ one transaction / one script / one lock
//
//	  Guard (Write / Last)       in-memory [Memory] here; PostgreSQL, SQLite and Redis each in its
//	                             own package (fence/pgfence, fence/sqlitefence, fence/redisfence), so
//	                             a program links only the driver it uses. Each also has a general
//	                             form (Do) that runs YOUR statements inside the same atomic step as
//	                             the check.
//	  Admitter + TokenStore      for effects the store cannot make atomic with a check (a plain HTTP
//	                             service): serialize per key in this process, record t, then run the
//	                             effect, so the fence is never behind an effect whose answer was lost.
//	                             Used by [Middleware] and by the fence/gateway package; tokens persist
//	                             in a bbolt file (fence/boltfence).
//
// An Admitter is a fence only while it is the sole path to the resource: every write must pass
// through the same process (the gateway of seed 004). Two replicas of a service, each with its
// own Admitter, do not fence each other; use a store-side guard instead.
//
// Keys are 1..[MaxKeyLen] bytes of UTF-8 without NUL; token 0 is never valid ([ErrInvalidToken]).
// Invalid input changes nothing.
package fence
