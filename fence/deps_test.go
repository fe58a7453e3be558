package fence_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the public fence packages free of server code: their non-test files
// import only the standard library, the store drivers, fence itself and sequencer; sequencer
// imports only the standard library.
func TestImports(t *testing.T) {
	allowed := []string{
		"github.com/jackc/pgx/v5",
		"github.com/redis/go-redis/v9",
		"modernc.org/sqlite",
		"go.etcd.io/bbolt",
		"github.com/leasehold/leasehold/fence",
		"github.com/leasehold/leasehold/sequencer",
	}
	for _, dir := range []string{".", "gateway", "../sequencer"} {
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
					if dir == "../sequencer" {
						break // the standard library only: any resource can import it
					}
					if p == a || strings.HasPrefix(p, a+"/") {
						ok = true
					}
				}
				if !ok {
					t.Errorf("%s imports %s, outside the allowed set", f, p)
				}
			}
		}
	}
}
