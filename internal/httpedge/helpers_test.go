package httpedge_test

// The endpoints and middlewares of this package are tested on a real
// server (internal/harness/servertest), as clients reach them, with its
// helpers (servertest.Ctx, NewSession, Acquire, HTTPGet, MustOK).
