package fsm

// staleKV reports whether a fenced write with token is stale over the key's
// last accepted token (a seam: see seam_token.go).
func staleKV(token, last uint64, strict bool) bool { return token < last || (strict && token == last) }
