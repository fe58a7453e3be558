// Package buildinfo reports what binary is running: the release version of
// its source tree, the VCS commit it was built from and the Go version, the
// last two as recorded by the Go toolchain (runtime/debug.ReadBuildInfo).
// `leasehold version` prints it and the leasehold_build_info metric carries
// it.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Release is the version of this source tree: the newest entry of
// CHANGELOG.md, changed in the commit that is tagged with it.
const Release = "v0.1.0"

// Set with -ldflags "-X github.com/leasehold/leasehold/internal/buildinfo.version=v1.2.0
// -X github.com/leasehold/leasehold/internal/buildinfo.commit=abc123"
// (scripts/release.sh, scripts/image.sh). A non-empty version wins over
// Release; a non-empty commit wins over what the toolchain recorded, for a
// build without VCS information (a source tarball, a container build without
// .git, GOFLAGS=-buildvcs=false).
var version, commit string

// Info describes the running binary. Commit and CommitTime are "unknown" for
// a test binary or a build outside a VCS checkout.
type Info struct {
	// Version is the release the source tree belongs to (Release, such as
	// v0.1.0), or the version stamped with -ldflags. A build between two
	// releases says the last one; its Commit tells them apart.
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
	info.Version = Release
	if version != "" {
		info.Version = version
	}
	if commit != "" {
		info.Commit = commit
	}
	return info
}

func fromToolchain() Info {
	info := Info{Commit: "unknown", CommitTime: "unknown", GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return info
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
