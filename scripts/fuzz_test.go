package scripts

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeGo stands in for go on PATH: every call but those for target FuzzT3
// passes; the calls for FuzzT3 behave as the script $FAKE says, call n
// (from 1) counted in $FAKE_DIR/calls.
const fakeGo = `#!/usr/bin/env bash
pkg="${@: -1}"
case "$*" in *FuzzT3*) ;; *) exit 0;; esac
n=$(( $(cat "$FAKE_DIR/calls" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$FAKE_DIR/calls"
race() { echo "--- FAIL: FuzzT3 (9.03s)"; echo "    context deadline exceeded"; echo FAIL; exit 1; }
case "$FAKE" in
race-until-*) [ "$n" -le "${FAKE#race-until-}" ] && race; exit 0;;
input) mkdir -p "$pkg/testdata/fuzz/FuzzT3"; echo x > "$pkg/testdata/fuzz/FuzzT3/0123"; race;;
other) echo "--- FAIL: FuzzT3"; echo "    panic: boom"; exit 2;;
esac
`

// TestFuzzRetriesOnlyTheDeadlineRace runs fuzz.sh over a tree of eight
// fuzz targets with a stand-in go: a target that fails only with Go's
// deadline race (go.dev/issue/75804) and writes no input runs again, up to
// three times; a written input or another failure fails at once.
func TestFuzzRetriesOnlyTheDeadlineRace(t *testing.T) {
	script, err := os.ReadFile("fuzz.sh")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		fake   string
		status int
		calls  int
		ran    int // targets started
	}{
		{"race-until-0", 0, 1, 8},
		{"race-until-1", 0, 2, 8},
		{"race-until-2", 0, 3, 8},
		{"race-until-3", 1, 3, 3},
		{"input", 1, 1, 3},
		{"other", 2, 1, 3},
	}
	for _, tc := range tests {
		t.Run(tc.fake, func(t *testing.T) {
			root := t.TempDir()
			bin := filepath.Join(root, "bin")
			for _, d := range []string{"scripts", "bin"} {
				if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			write := func(name, s string, mode os.FileMode) {
				t.Helper()
				if err := os.WriteFile(filepath.Join(root, name), []byte(s), mode); err != nil {
					t.Fatal(err)
				}
			}
			write("scripts/fuzz.sh", string(script), 0o755)
			write("bin/go", fakeGo, 0o755)
			for i := 1; i <= 8; i++ {
				dir := fmt.Sprintf("p%d", i)
				if err := os.Mkdir(filepath.Join(root, dir), 0o755); err != nil {
					t.Fatal(err)
				}
				write(dir+"/x_test.go", fmt.Sprintf("package p\n\nfunc FuzzT%d(f *testing.F) {}\n", i), 0o644)
			}
			cmd := exec.Command("bash", filepath.Join(root, "scripts", "fuzz.sh"), "1")
			cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "FAKE="+tc.fake, "FAKE_DIR="+root)
			out, err := cmd.CombinedOutput()
			status := 0
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				status = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			calls, _ := os.ReadFile(filepath.Join(root, "calls"))
			n, _ := strconv.Atoi(strings.TrimSpace(string(calls)))
			ran := 0
			for _, line := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(line, "fuzz ./") {
					ran++
				}
			}
			if status != tc.status || n != tc.calls || ran != tc.ran {
				t.Fatalf("status %d, FuzzT3 run %d times, %d targets started; want %d, %d, %d\n%s", status, n, ran, tc.status, tc.calls, tc.ran, out)
			}
		})
	}
}
