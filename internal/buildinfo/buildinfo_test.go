package buildinfo

import (
	"runtime"
	"strings"
	"testing"
)

// TestGet: a binary says the release of its source tree and the Go version,
// and -X overrides win over both the release and what the toolchain
// recorded.
func TestGet(t *testing.T) {
	info := Get()
	if info.GoVersion != runtime.Version() || info.Version != "v0.1.0" || info.Commit == "" {
		t.Fatalf("Get() = %+v, want version v0.1.0", info)
	}
	version, commit = "v9.9.9", "abc123"
	defer func() { version, commit = "", "" }()
	info = Get()
	if info.Version != "v9.9.9" || info.Commit != "abc123" {
		t.Fatalf("with -X overrides: %+v", info)
	}
	if s := info.String(); !strings.HasPrefix(s, "leasehold v9.9.9 (commit abc123, ") || !strings.HasSuffix(s, runtime.Version()+")") {
		t.Fatalf("String() = %q", s)
	}
}
