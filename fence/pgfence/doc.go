// Package pgfence is the fence guard for PostgreSQL (pgx v5): a fence table in the database
// checks and advances a key's token in the same transaction as the caller's statements, so a
// stale writer's effect never commits. It is the only fence package that links pgx; see
// package fence for the invariant every guard keeps.
//
//	g := pgfence.New(pool) // fence.WithMode, fence.WithTable apply
//	err := g.Init(ctx)     // or create the table in a migration (see Guard)
//	err = g.Do(ctx, "report:417", lock.Token(), func(tx pgx.Tx) error { … })
package pgfence
