// Package buildinfo reports what binary is running: the module version,
// the VCS commit it was built from and the Go version, as recorded by the
// Go toolchain (runtime/debug.ReadBuildInfo). `leasehold version` prints
// it and the leasehold_build_info metric carries it.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set with -ldflags "-X github.com/leasehold/leasehold/internal/buildinfo.version=v1.2.0
// -X github.com/leasehold/leasehold/internal/buildinfo.commit=abc123" when the
// build has no VCS information (a source tarball, a container build without
// .git, GOFLAGS=-buildvcs=false); they win over what the toolchain recorded.
var version, commit string

// Info describes the running binary. Unknown fields are "unknown" (a test
// binary, or a build outside a VCS checkout).
type Info struct {
	// Version is the main module's version: a release tag such as v1.2.0
	// (`go install ...@v1.2.0`, or a build of a tagged checkout), a
	// pseudo-version for an untagged checkout, "(devel)" for a build
	// without VCS information (-buildvcs=false).
	Version string `json:"version"`
	// Commit is the VCS revision, with "-dirty" when the tree had changes.
	Commit string `json:"commit"`
	// CommitTime is the revision's commit time (RFC 3339).
	CommitTime string `json:"commit_time"`
	// GoVersion is the toolchain that built the binary.
	GoVersion string `json:"go_version"`
}

// Get reads the build information of the running binary.
func Get() Info {
	info := fromToolchain()
	if version != "" {
		info.Version = version
	}
	if commit != "" {
		info.Commit = commit
	}
	return info
}

func fromToolchain() Info {
	info := Info{Version: "unknown", Commit: "unknown", CommitTime: "unknown", GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return info
	}
	if v := bi.Main.Version; v != "" {
		info.Version = v
	}
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Commit = s.Value
		case "vcs.time":
			info.CommitTime = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && info.Commit != "unknown" {
		info.Commit += "-dirty"
	}
	return info
}

// String is the one-line form `leasehold --version` prints.
func (i Info) String() string {
	return fmt.Sprintf("leasehold %s (commit %s, %s, %s)", i.Version, i.Commit, i.CommitTime, i.GoVersion)
}
