package fence_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the public fence packages free of server code and each store's driver in
// its own package: fence itself imports no driver (a PostgreSQL user links no Redis, SQLite or
// bbolt code), each fence/*fence package only its store's driver, and sequencer only the
// standard library. Only non-test files count.
func TestImports(t *testing.T) {
	const (
		self = "github.com/leasehold/leasehold/fence"
		seq  = "github.com/leasehold/leasehold/sequencer"
	)
	for dir, allowed := range map[string][]string{
		".":            {seq},
		"pgfence":      {self, "github.com/jackc/pgx/v5"},
		"redisfence":   {self, "github.com/redis/go-redis/v9"},
		"sqlitefence":  {self, "modernc.org/sqlite"},
		"boltfence":    {self, "go.etcd.io/bbolt"},
		"gateway":      {self, seq, self + "/boltfence"},
		"../sequencer": nil, // the standard library only: any resource can import it
	} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Fatalf("no Go files in %s", dir)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range af.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				first, _, _ := strings.Cut(p, "/")
				if !strings.Contains(first, ".") {
					continue // standard library
				}
				ok := false
				for _, a := range allowed {
					ok = ok || p == a || (a != self && strings.HasPrefix(p, a+"/"))
				}
				if !ok {
					t.Errorf("%s imports %s, outside the allowed set %v", f, p, allowed)
				}
			}
		}
	}
}
