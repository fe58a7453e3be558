package e2e

import (
	"os/exec"
	"strings"
	"testing"
)

// goList runs `go list` from the module root with the given arguments.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// Every package has a doc comment.
func TestPackagesHaveDocs(t *testing.T) {
	for _, line := range goList(t, "-f", "{{.ImportPath}}\t{{.Doc}}", "./...") {
		path, doc, _ := strings.Cut(line, "\t")
		if strings.TrimSpace(doc) == "" {
			t.Errorf("package %s has no doc comment", path)
		}
	}
}

// The public packages a user imports (client, api, fence, sequencer) never pull in
// server code: a client binary stays small and the boundary stays real.
func TestPublicPackagesImportNoServer(t *testing.T) {
	const module = "github.com/leasehold/leasehold/"
	for _, pkg := range []string{"./client", "./api/...", "./fence/...", "./sequencer"} {
		for _, dep := range goList(t, "-deps", pkg) {
			rest, ok := strings.CutPrefix(dep, module)
			if !ok {
				continue
			}
			if strings.HasPrefix(rest, "internal/") || strings.HasPrefix(rest, "cmd/") {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
}
