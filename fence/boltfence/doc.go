// Package boltfence is a durable fence.TokenStore in a local bbolt file, for a
// fence.Admitter (the fence middleware and the gateway): a token is fsync'd before the
// effect it admits runs. It is the only fence package that links bbolt.
package boltfence
