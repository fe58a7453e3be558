package scenario

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	f, err := parse("x.txt", "# top\n\nacquire a doc mode=shared try\n----\nline 1\nline 2\n\n# between\nrelease a doc\n----\n\n# end\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.steps) != 2 {
		t.Fatalf("%d steps, want 2", len(f.steps))
	}
	s := f.steps[0]
	if s.Cmd != "acquire" || !slices.Equal(s.Args, []string{"a", "doc", "try"}) || s.Opt("mode", "") != "shared" || s.Opt("permits", "1") != "1" {
		t.Fatalf("step %+v", s)
	}
	if !slices.Equal(s.want, []string{"line 1", "line 2"}) || s.Pos != "x.txt:3" {
		t.Fatalf("want %q at %s", s.want, s.Pos)
	}
	if len(f.steps[1].want) != 0 || !slices.Equal(f.after, []string{"", "# end"}) {
		t.Fatalf("second step %q, after %q", f.steps[1].want, f.after)
	}
	if _, err := parse("y.txt", "acquire a doc\nacquired\n"); err == nil || !strings.Contains(err.Error(), "y.txt:1") {
		t.Fatalf("a command without ---- parsed: %v", err)
	}
}

// TestRunUpdates: with LEASEHOLD_UPDATE_SCENARIOS=1 a file gets what the
// steps printed, its comments kept, and then passes as it stands.
func TestRunUpdates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "echo.txt")
	text := "# echo\n\necho a b\n----\nstale\n\necho c\n----\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	echo := func(_ *testing.T, s *Step) string { return strings.Join(s.Args, "\n") }
	t.Setenv("LEASEHOLD_UPDATE_SCENARIOS", "1")
	Files(t, path)[0].Run(t, echo)
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "# echo\n\necho a b\n----\na\nb\n\necho c\n----\nc\n"; string(got) != want {
		t.Fatalf("rewritten:\n%s\nwant:\n%s", got, want)
	}
	t.Setenv("LEASEHOLD_UPDATE_SCENARIOS", "")
	Files(t, path)[0].Run(t, echo)
}
