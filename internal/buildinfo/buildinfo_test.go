package buildinfo

import (
	"runtime"
	"strings"
	"testing"
)

// TestGet: the Go version is always known, and -X overrides win over what
// the toolchain recorded.
func TestGet(t *testing.T) {
	info := Get()
	if info.GoVersion != runtime.Version() || info.Version == "" || info.Commit == "" {
		t.Fatalf("Get() = %+v", info)
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
