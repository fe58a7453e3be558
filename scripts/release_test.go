package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestReleaseBuildsStampedBinaries runs release.sh for this machine's
// platform: it writes a static binary named for the version and platform,
// whose `version` prints the VERSION stamped through -ldflags, and a
// SHA256SUMS file that sha256sum -c accepts.
func TestReleaseBuildsStampedBinaries(t *testing.T) {
	dist := t.TempDir()
	platform := runtime.GOOS + "/" + runtime.GOARCH
	cmd := exec.Command("bash", "release.sh")
	cmd.Env = append(os.Environ(), "VERSION=v9.8.7", "COMMIT=abc123", "PLATFORMS="+platform, "DIST="+dist)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("release.sh: %v", err)
	}
	bin := filepath.Join(dist, "leasehold-v9.8.7-"+runtime.GOOS+"-"+runtime.GOARCH)
	if want := bin + "\n" + filepath.Join(dist, "SHA256SUMS") + "\n"; string(out) != want {
		t.Fatalf("release.sh printed %q, want %q", out, want)
	}
	v, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("%s version: %v", bin, err)
	}
	if !strings.HasPrefix(string(v), "leasehold v9.8.7 (commit abc123, ") {
		t.Fatalf("version printed %q, want v9.8.7 and commit abc123", v)
	}
	check := exec.Command("sha256sum", "-c", "SHA256SUMS")
	check.Dir = dist
	if msg, err := check.CombinedOutput(); err != nil {
		t.Fatalf("sha256sum -c: %v\n%s", err, msg)
	}
	if msg, err := exec.Command("go", "version", "-m", bin).Output(); err != nil || !strings.Contains(string(msg), "CGO_ENABLED=0") || !strings.Contains(string(msg), "-trimpath=true") {
		t.Fatalf("go version -m %s: %v: want a static (CGO_ENABLED=0) -trimpath build\n%s", bin, err, msg)
	}
}

// TestReleaseRefusesAVersionThatIsNoTag: a VERSION that does not start with
// v and a digit is refused before anything is built.
func TestReleaseRefusesAVersionThatIsNoTag(t *testing.T) {
	dist := t.TempDir()
	cmd := exec.Command("bash", "release.sh")
	cmd.Env = append(os.Environ(), "VERSION=latest", "DIST="+dist)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), `version "latest" is not a vX.Y.Z tag`) {
		t.Fatalf("release.sh with VERSION=latest: %v\n%s", err, out)
	}
	if entries, _ := os.ReadDir(dist); len(entries) != 0 {
		t.Fatalf("dist has %d entries after a refusal", len(entries))
	}
}
