// Package sqlitefence is the fence guard for SQLite (modernc.org/sqlite, pure Go): a fence
// table checks and advances a key's token in the same BEGIN IMMEDIATE transaction as the
// caller's statements. It is the only fence package that links SQLite; see package fence for
// the invariant every guard keeps.
package sqlitefence
