// Package redisfence is the fence guard for Redis (go-redis v9): a Lua script checks and
// advances a key's token and applies the caller's effect in one atomic step. It is the only
// fence package that links go-redis; see package fence for the invariant every guard keeps,
// and NewDurable for the persistence settings that keep the fence across a Redis restart.
package redisfence
