package scripts

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The documentation checked: the README, the CHANGELOG and every page
// under docs/, relative to the repository root.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CHANGELOG.md"}
	err := filepath.WalkDir("../docs", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, strings.TrimPrefix(filepath.ToSlash(path), "../"))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

var (
	inlineCode = regexp.MustCompile("`[^`\n]*`")
	linkTarget = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	mdLink     = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// prose is the text of a Markdown file without its fenced code blocks, one
// entry per line (a code line is empty).
func prose(text string) []string {
	lines := strings.Split(text, "\n")
	fenced := false
	for i, ln := range lines {
		if strings.HasPrefix(strings.TrimSpace(ln), "```") {
			fenced = !fenced
			lines[i] = ""
			continue
		}
		if fenced {
			lines[i] = ""
		}
	}
	return lines
}

// anchors are the fragment ids a Markdown renderer (GitHub's rule) gives
// the headings of text: lower case, punctuation dropped, spaces as hyphens,
// a repeated id suffixed -1, -2, ….
func anchors(text string) map[string]bool {
	ids := map[string]bool{}
	seen := map[string]int{}
	for _, ln := range prose(text) {
		m := heading.FindStringSubmatch(ln)
		if m == nil {
			continue
		}
		h := mdLink.ReplaceAllString(m[1], "$1")
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		id := b.String()
		if n := seen[id]; n > 0 {
			ids[fmt.Sprintf("%s-%d", id, n)] = true
		} else {
			ids[id] = true
		}
		seen[id]++
	}
	return ids
}

// TestDocLinks: every relative link in the README, the CHANGELOG and
// docs/**/*.md names a file of the repository, and a #fragment names a
// heading of the page it points to.
func TestDocLinks(t *testing.T) {
	texts := map[string]string{}
	read := func(path string) (string, error) {
		if s, ok := texts[path]; ok {
			return s, nil
		}
		b, err := os.ReadFile(filepath.Join("..", path))
		texts[path] = string(b)
		return string(b), err
	}
	checked := 0
	for _, file := range docFiles(t) {
		text, err := read(file)
		if err != nil {
			t.Fatal(err)
		}
		for n, ln := range prose(text) {
			for _, m := range linkTarget.FindAllStringSubmatch(inlineCode.ReplaceAllString(ln, ""), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				path, frag, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(file), path)))
					if strings.HasPrefix(dest, "../") {
						t.Errorf("%s:%d: %s leaves the repository", file, n+1, target)
						continue
					}
					if _, err := os.Stat(filepath.Join("..", dest)); err != nil {
						t.Errorf("%s:%d: %s: no file %s", file, n+1, target, dest)
						continue
					}
				}
				if frag == "" {
					continue
				}
				if !strings.HasSuffix(dest, ".md") {
					t.Errorf("%s:%d: %s: a fragment on a file that is not Markdown", file, n+1, target)
					continue
				}
				destText, err := read(dest)
				if err != nil {
					t.Fatal(err)
				}
				if !anchors(destText)[frag] {
					t.Errorf("%s:%d: %s: %s has no heading #%s", file, n+1, target, dest, frag)
				}
			}
		}
	}
	if checked < 30 {
		t.Fatalf("only %d relative links found: is the link pattern still right?", checked)
	}
}

// TestReadmeIsAFrontDoor: the README stays a short entry point (at most 400
// lines); the manual lives under docs/.
func TestReadmeIsAFrontDoor(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > 400 {
		t.Fatalf("README.md has %d lines; keep it at most 400 and move the details into docs/", n)
	}
}

// TestAnchors pins the fragment rule on headings the docs link to.
func TestAnchors(t *testing.T) {
	ids := anchors("# Restoring (the 3 a.m. procedure)\n## `--if-free`: skip\n```\n# not a heading\n```\n## Watch\n## Watch\n")
	for _, id := range []string{"restoring-the-3-am-procedure", "--if-free-skip", "watch", "watch-1"} {
		if !ids[id] {
			t.Errorf("no anchor %q in %v", id, ids)
		}
	}
	if ids["not-a-heading"] {
		t.Errorf("a line in a code block made an anchor: %v", ids)
	}
}
