package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/api"
)

// raceEnabled is set by race_test.go when the tests run with -race; the
// binary under test is then built with -race too.
var raceEnabled bool

// leaseholdBin is the binary the end-to-end tests run, built once by TestMain.
var leaseholdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "leasehold-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	leaseholdBin = filepath.Join(dir, "leasehold")
	args := []string{"build", "-o", leaseholdBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build leasehold:", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func TestJSONRequested(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"status", "x", "-o", "json"}, true},
		{[]string{"-o", "json", "frob"}, true},
		{[]string{"acquire", "x", "--ttl", "bogus", "--output", "json"}, true},
		{[]string{"acquire", "-ojson"}, true},
		{[]string{"acquire", "-o=json"}, true},
		{[]string{"acquire", "--output=json"}, true},
		{[]string{"status", "x", "-o", "text"}, false},
		{[]string{"status", "x", "-o"}, false},
		{[]string{"status", "json"}, false},
		{[]string{"run", "x", "--", "jq", "-o", "json"}, false},
	} {
		if got := jsonRequested(tc.args); got != tc.want {
			t.Errorf("jsonRequested(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{exitError{3}, 3},
		{fmt.Errorf("wrapped: %w", exitError{130}), 130},
		{usageErr("bad"), 2},
		{api.Errorf(api.CodeStaleToken, "old"), 4},
		{fmt.Errorf("listen: %w", errors.New("address in use")), 1},
	} {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
