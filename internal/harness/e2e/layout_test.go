package e2e

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// goList runs `go list` from the module root with the given arguments.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = "../../.."
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

// TestForbiddenImports pins what some packages must never import, each
// with the reason. Direct imports are checked for the server's inner
// packages, every dependency for the public ones.
func TestForbiddenImports(t *testing.T) {
	const module = "github.com/leasehold/leasehold/"
	noIO := []string{"net", "net/", "os", "os/", "syscall", "connectrpc.com/", "github.com/hashicorp/raft", module + "internal/raftnode", module + "internal/server", module + "internal/lessor"}
	for _, rule := range []struct {
		pkg       string
		deps      bool // every dependency, not only direct imports
		forbidden []string
		why       string
	}{
		{"./internal/fsm", false, append(noIO, "time"), "the state machine is a pure function of the log: no I/O, no clock, no consensus (time enters only inside commands)"},
		{"./internal/fsm", true, []string{"net/http", "connectrpc.com/", "github.com/hashicorp/", module + "internal/server", module + "internal/raftnode", module + "api/leaseholdv1/leaseholdv1connect"}, "nothing the state machine links, internal/auth's policies included, serves or calls RPCs"},
		{"./internal/hub", false, append(noIO, "time"), "the event hub only records applied events and wakes the streams and queued acquires that wait on them: no network, no streams, no raft, no server, no clock (progress wake-ups count log entries)"},
		{"./internal/auth", false, []string{"net", "net/", "os", "os/", "github.com/hashicorp/raft", module + "internal/raftnode", module + "internal/server"}, "authentication, the decision and redaction are pure functions of the credentials, the policies and the request: the server reads the headers and the connection and keeps the handlers, so auth has no network, files or consensus"},
		{"./internal/authedge", true, []string{"github.com/hashicorp/raft", module + "internal/raftnode", module + "internal/server"}, "the auth glue finds the principal, decides and revokes from the applied state and the funcs the server hands it, so it links no raft, no node and no handler"},
		{"./internal/lessor", false, []string{"net", "net/", "connectrpc.com/", "github.com/hashicorp/raft", module + "internal/raftnode", module + "internal/server"}, "the lessor reaches raft only through its Proposer and Confirmer, and has no network of its own"},
		{"./internal/membership", false, []string{module + "internal/server"}, "membership is who is in the cluster and who leads it: the server validates, forwards and mounts its ClusterService, and hands the Manager what it needs (apply, peer clients) in its Config"},
		{"./internal/admission", true, []string{"github.com/hashicorp/raft", module + "internal/raftnode", module + "internal/fsm", module + "internal/lessor", module + "internal/hub", module + "internal/server", module + "internal/auth"}, "admission counts what a node admits from its clients and nothing more: it sees neither the replicated state nor raft nor the handlers, so every limit is testable alone and the server glues it in (the principal, the ended sessions come in as values)"},
		{"./internal/httpedge", true, []string{"github.com/hashicorp/raft", module + "internal/raftnode", module + "internal/server", module + "internal/fsm", module + "internal/lessor", module + "internal/hub", module + "internal/auth"}, "the HTTP side of the API port (TLS, access log, origin check, plain endpoints) sees neither raft nor the state nor the handlers: the server hands it what it needs as small interfaces and funcs"},
		{"./internal/web", true, []string{"github.com/hashicorp/raft", module + "internal/raftnode", module + "internal/server", module + "internal/lessor", module + "internal/hub"}, "the dashboard assembles its views from the applied state (fsm) and what the server hands it as values and funcs, so it never reaches raft, the lessor or the handlers"},
		{"./internal/metrics", true, []string{"github.com/hashicorp/raft", module + "internal/raftnode", module + "internal/server", module + "internal/lessor", module + "internal/hub", module + "internal/admission"}, "the metrics are definitions and label values the server feeds: they read the node only through their State at scrape time, so they link no raft, no node and no handler"},
		{"./internal/lockstream", true, []string{"github.com/hashicorp/raft", module + "internal/raftnode", module + "internal/server", module + "internal/fsm", module + "internal/lessor", module + "internal/hub", module + "internal/auth"}, "the lock stream multiplexes messages onto the unary handlers and reaches the node only through its Handler and Hooks: no raft, no state, no server"},
		{"./internal/validate", true, []string{"github.com/hashicorp/", "connectrpc.com/grpc", module + "internal/"}, "a request field is checked by a pure function of the field and the documented limit: nothing of the node, the state or the network"},
		{"./sequencer", true, []string{"."}, "resources verify sequencers with the standard library alone"},
		{"./client", true, []string{"github.com/hashicorp/", "go.etcd.io/bbolt", "modernc.org/", "github.com/jackc/", "github.com/redis/", module + "internal/", module + "fence"}, "a client binary carries no server, store or guard code"},
		{"./fence/pgfence", true, []string{"github.com/redis/", "modernc.org/", "go.etcd.io/bbolt", module + "internal/"}, "a PostgreSQL user links no Redis, SQLite or bbolt code"},
		{"./fence", true, []string{"github.com/jackc/", "github.com/redis/", "modernc.org/", "go.etcd.io/bbolt", module + "internal/"}, "the fence core links no store driver: each lives in its own fence/*fence package"},
		{"./api/...", true, []string{module + "internal/", module + "client", module + "fence"}, "the API is the bottom layer"},
		{"./cmd/leasehold", true, []string{module + "internal/harness/"}, "the binary ships no test harness"},
		{"./leaseholdtest", true, []string{module + "internal/harness/"}, "users' tests get an in-process server, not leasehold's own test harnesses"},
	} {
		field := "{{join .Imports \"\\n\"}}"
		if rule.deps {
			field = "{{join .Deps \"\\n\"}}"
		}
		for _, dep := range goList(t, "-f", field, rule.pkg) {
			for _, bad := range rule.forbidden {
				hit := dep == strings.TrimSuffix(bad, "/") || (strings.HasSuffix(bad, "/") && strings.HasPrefix(dep, bad)) || (!strings.HasSuffix(bad, "/") && bad != "." && strings.HasPrefix(dep, bad+"/"))
				if bad == "." { // anything outside the standard library
					first, _, _ := strings.Cut(dep, "/")
					hit = strings.Contains(first, ".") && !strings.HasPrefix(dep, "github.com/leasehold/leasehold/sequencer")
				}
				if hit {
					t.Errorf("%s imports %s: %s", rule.pkg, dep, rule.why)
				}
			}
		}
	}
}

// TestDependencyLists compares every non-standard package each shipped
// binary or library links with the list committed in docs/dev/deps, so a
// new dependency shows up in review. After a deliberate change:
//
//	LEASEHOLD_UPDATE_DEPS=1 go test ./internal/harness/e2e -run TestDependencyLists
func TestDependencyLists(t *testing.T) {
	for file, pkg := range map[string]string{
		"cmd-leasehold.txt": "./cmd/leasehold",
		"client.txt":        "./client",
		"fence.txt":         "./fence",
		"fence-pgfence.txt": "./fence/pgfence",
		"fence-gateway.txt": "./fence/gateway",
		"sequencer.txt":     "./sequencer",
	} {
		var deps []string
		seen := map[string]bool{}
		for _, line := range goList(t, "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg) {
			if line != "" && !seen[line] {
				seen[line] = true
				deps = append(deps, line)
			}
		}
		sort.Strings(deps)
		got := "# go list -deps " + pkg + " (non-standard packages); see TestDependencyLists\n" + strings.Join(deps, "\n") + "\n"
		path := filepath.Join("../../../docs/dev/deps", file)
		if os.Getenv("LEASEHOLD_UPDATE_DEPS") != "" {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (create it with LEASEHOLD_UPDATE_DEPS=1)", err)
		}
		if string(want) != got {
			t.Errorf("%s links other packages than %s lists:\n%s\nreview them, then LEASEHOLD_UPDATE_DEPS=1 go test ./internal/harness/e2e -run TestDependencyLists", pkg, path, lineDiff(string(want), got))
		}
	}
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}

// TestExamplesAreSelfContained: a godoc Example pasted into a user's
// program compiles: it uses the module's exported API and nothing the
// package's test files declare (helpers, fixtures, other examples).
func TestExamplesAreSelfContained(t *testing.T) {
	for _, dir := range []string{"client", "fence", "sequencer", "leaseholdtest"} {
		fset := token.NewFileSet()
		files, err := filepath.Glob(filepath.Join("../../..", dir, "*_test.go"))
		if err != nil {
			t.Fatal(err)
		}
		declared := map[string]bool{} // package-level names of the test files
		var parsed []*ast.File
		for _, f := range files {
			af, err := parser.ParseFile(fset, f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			parsed = append(parsed, af)
			for _, d := range af.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if d.Recv == nil {
						declared[d.Name.Name] = true
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.ValueSpec:
							for _, n := range s.Names {
								declared[n.Name] = true
							}
						case *ast.TypeSpec:
							declared[s.Name.Name] = true
						}
					}
				}
			}
		}
		for _, af := range parsed {
			for _, d := range af.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Example") {
					continue
				}
				var visit func(ast.Node) bool
				visit = func(n ast.Node) bool {
					switch n := n.(type) {
					case *ast.SelectorExpr: // x.Name: Name is not a package-level name
						ast.Inspect(n.X, visit)
						return false
					case *ast.Ident:
						if declared[n.Name] && (n.Obj == nil || isPackageLevel(af, n.Obj.Decl)) {
							t.Errorf("%s: %s uses %s, declared in the package's test files: pasted, it does not compile", fset.Position(n.Pos()), fn.Name.Name, n.Name)
						}
					}
					return true
				}
				ast.Inspect(fn.Body, visit)
			}
		}
	}
}

// isPackageLevel reports whether decl is one of f's top-level declarations.
func isPackageLevel(f *ast.File, decl any) bool {
	for _, d := range f.Decls {
		if any(d) == decl {
			return true
		}
		if g, ok := d.(*ast.GenDecl); ok {
			for _, s := range g.Specs {
				if any(s) == decl {
					return true
				}
			}
		}
	}
	return false
}

// TestNoMutationHooks: the production packages the simulation mutates
// carry no hooks for it: no mutant build tags, no package-level function
// variables (whether set by a function literal, by a function's name, or
// declared with a function type and set elsewhere) and no init functions
// that could set one. Mutants replace whole seam files instead
// (internal/harness/sim/testdata/mutants, applied with go build -overlay), each a
// file the package has.
func TestNoMutationHooks(t *testing.T) {
	for _, dir := range []string{"internal/fsm", "internal/lessor"} {
		files, err := filepath.Glob(filepath.Join("../../..", dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		var parsed []*ast.File
		funcs := map[string]bool{}     // package-level functions
		funcTypes := map[string]bool{} // package-level types that are function types
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(fset, f, nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			parsed = append(parsed, af)
			for _, d := range af.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if d.Recv == nil {
						funcs[d.Name.Name] = true
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						if ts, ok := s.(*ast.TypeSpec); ok {
							if _, ok := ts.Type.(*ast.FuncType); ok {
								funcTypes[ts.Name.Name] = true
							}
						}
					}
				}
			}
		}
		if len(parsed) == 0 {
			t.Fatalf("%s: no Go files", dir)
		}
		for _, af := range parsed {
			for _, cg := range af.Comments {
				for _, c := range cg.List {
					if (strings.HasPrefix(c.Text, "//go:build") || strings.HasPrefix(c.Text, "// +build")) && strings.Contains(c.Text, "mutant_") {
						t.Errorf("%s: a mutant build tag in a production package: %s", fset.Position(c.Pos()), c.Text)
					}
				}
			}
			for _, d := range af.Decls {
				if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.Name == "init" {
					t.Errorf("%s: an init function in a production package the simulation mutates, where a build could swap a decision", fset.Position(fn.Pos()))
				}
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.VAR {
					continue
				}
				for _, s := range g.Specs {
					vs := s.(*ast.ValueSpec)
					if isFuncType(vs.Type, funcTypes) {
						t.Errorf("%s: a package-level variable of function type (%s), a hook that a build can swap", fset.Position(vs.Pos()), vs.Names[0].Name)
						continue
					}
					for _, v := range vs.Values {
						switch v := ast.Unparen(v).(type) {
						case *ast.FuncLit:
							t.Errorf("%s: a package-level function variable, a hook that a build can swap", fset.Position(v.Pos()))
						case *ast.Ident:
							if funcs[v.Name] {
								t.Errorf("%s: a package-level variable set to the function %s, a hook that a build can swap", fset.Position(v.Pos()), v.Name)
							}
						}
					}
				}
			}
		}
	}
	// Every file a mutant replaces exists, so a renamed seam cannot leave
	// a mutant that no longer builds (TestMutants runs only with the
	// leasehold_sim tag).
	mutants, err := filepath.Glob("../sim/testdata/mutants/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, root := range mutants {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			if _, err := os.Stat(filepath.Join("../../..", rel)); err != nil {
				t.Errorf("mutant %s replaces %s, which does not exist", filepath.Base(root), rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// isFuncType reports whether a declared type expression is a function type:
// a literal one or a package-level type whose definition is one.
func isFuncType(e ast.Expr, funcTypes map[string]bool) bool {
	switch e := e.(type) {
	case *ast.FuncType:
		return true
	case *ast.ParenExpr:
		return isFuncType(e.X, funcTypes)
	case *ast.Ident:
		return funcTypes[e.Name]
	}
	return false
}
