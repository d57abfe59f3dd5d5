package fetch

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestHotDefersOpenCoded: every deferred call in the functions each URL
// runs is open-coded by the compiler (go build -gcflags=-d=defer). Past
// the compiler's limit (returns × defers at most 15, no defer in a loop)
// a function's defers go through the runtime instead (deferprocStack,
// deferreturn, and a walk of the stack to find them): 1.3% more
// instructions a URL, with nothing failing. The split of attempt into
// leased and respond, and of copyBody into saveBody, keeps them under it.
func TestHotDefersOpenCoded(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package")
	}
	hot := map[string]bool{"attempt": true, "leased": true, "respond": true, "copyBody": true, "saveBody": true, "runJob": true}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(goBin, "build", "-gcflags=-d=defer", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-d=defer: %v\n%s", err, out)
	}
	// file:line -> how the defer there is made
	kinds := map[string]string{}
	re := regexp.MustCompile(`(?m)^(?:\./)?(?:fetch/)?([a-z0-9_]+\.go):(\d+):\d+: (.*defer)$`)
	for _, m := range re.FindAllStringSubmatch(string(out), -1) {
		kinds[m[1]+":"+m[2]] = m[3]
	}
	if len(kinds) == 0 {
		t.Fatalf("no defer reported by the compiler:\n%s", out)
	}
	fset := token.NewFileSet()
	seen := map[string]int{}
	files, _ := filepath.Glob("*.go")
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || !hot[fd.Name.Name] || fd.Recv == nil {
				continue
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if _, ok := n.(*ast.FuncLit); ok {
					return false // a closure's defers are its own
				}
				ds, ok := n.(*ast.DeferStmt)
				if !ok {
					return true
				}
				seen[fd.Name.Name]++
				pos := fset.Position(ds.Pos())
				if k := kinds[name+":"+strconv.Itoa(pos.Line)]; k != "open-coded defer" {
					t.Errorf("%s: the defer at %s:%d is %q, want open-coded", fd.Name.Name, name, pos.Line, k)
				}
				return true
			})
		}
	}
	for fn := range hot {
		if seen[fn] == 0 {
			t.Errorf("%s: no defer found (renamed, or its defers gone: update the list)", fn)
		}
	}
}
