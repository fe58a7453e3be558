// Package scenario reads scenario files: tests that are also documentation.
// A file is a list of steps, each a command line, a line "----" and the
// state expected after it, up to the next blank line:
//
//	# A shared name holds many readers; a queued writer blocks later readers.
//
//	acquire a doc mode=shared
//	----
//	acquired doc a token=1
//	doc: holders [a shared t1]
//
// Lines starting with # and blank lines between steps are comments. The
// package that owns the file decides what a command does and prints the
// state after it; Run compares that with the file. With
// LEASEHOLD_UPDATE_SCENARIOS=1 it writes what the code printed instead (a
// new file may leave every expected block empty), and the diff is for a
// reader to check before it is committed. The style follows
// CockroachDB's datadriven files and Go's txtar, in a few dozen lines.
package scenario

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Step is one command of a file.
type Step struct {
	// Pos is "file:line" of the command, for messages.
	Pos string
	// Cmd is the command's first word; Args the other words without "=",
	// Opts the words key=value.
	Cmd  string
	Args []string
	Opts map[string]string

	line   string
	before []string // comment and blank lines above the command
	want   []string
}

// Arg returns the i-th argument, or fails the test when there is none.
func (s *Step) Arg(t testing.TB, i int) string {
	t.Helper()
	if i >= len(s.Args) {
		t.Fatalf("%s: %s needs %d arguments", s.Pos, s.Cmd, i+1)
	}
	return s.Args[i]
}

// Opt returns the value of key=value, or def when the step has none.
func (s *Step) Opt(key, def string) string {
	if v, ok := s.Opts[key]; ok {
		return v
	}
	return def
}

// File is a parsed scenario file.
type File struct {
	Name  string // the file's base name without .txt
	path  string
	steps []*Step
	after []string // comment lines after the last step
}

// Files parses every file matching pattern; a file that is not a list of
// steps fails the test.
func Files(t testing.TB, pattern string) []*File {
	t.Helper()
	paths, err := filepath.Glob(pattern)
	if err != nil || len(paths) == 0 {
		t.Fatalf("no scenario files match %s (%v)", pattern, err)
	}
	files := make([]*File, 0, len(paths))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parse(p, string(data))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

func parse(path, text string) (*File, error) {
	f := &File{Name: strings.TrimSuffix(filepath.Base(path), ".txt"), path: path}
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	var pending []string
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			pending = append(pending, line)
			continue
		}
		pos := fmt.Sprintf("%s:%d", path, i+1)
		if i+1 >= len(lines) || lines[i+1] != "----" {
			return nil, fmt.Errorf("%s: the command %q is not followed by a line ----", pos, line)
		}
		s := &Step{Pos: pos, line: line, before: pending, Opts: map[string]string{}}
		pending = nil
		words := strings.Fields(line)
		s.Cmd = words[0]
		for _, w := range words[1:] {
			if k, v, ok := strings.Cut(w, "="); ok {
				s.Opts[k] = v
			} else {
				s.Args = append(s.Args, w)
			}
		}
		for i += 2; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			s.want = append(s.want, lines[i])
		}
		i-- // the blank line, if any, belongs to what follows
		f.steps = append(f.steps, s)
	}
	f.after = pending
	return f, nil
}

// Run runs the steps in order: do executes one and returns the state it
// printed, one or more lines without blank ones. Every step whose output
// differs from the file is reported.
func (f *File) Run(t *testing.T, do func(t *testing.T, s *Step) string) {
	t.Helper()
	update := os.Getenv("LEASEHOLD_UPDATE_SCENARIOS") == "1"
	var out strings.Builder
	for _, s := range f.steps {
		got := strings.TrimRight(do(t, s), "\n")
		if strings.Contains(got, "\n\n") {
			t.Fatalf("%s: %s printed a blank line, which would end its block:\n%s", s.Pos, s.Cmd, got)
		}
		if want := strings.Join(s.want, "\n"); want != got && !update {
			t.Errorf("%s: %s\ngot:\n%s\nwant:\n%s", s.Pos, s.line, got, want)
		}
		for _, l := range append(s.before, s.line, "----") {
			out.WriteString(l + "\n")
		}
		if got != "" {
			out.WriteString(got + "\n")
		}
	}
	if !update {
		return
	}
	for _, l := range f.after {
		out.WriteString(l + "\n")
	}
	if err := os.WriteFile(f.path, []byte(out.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
