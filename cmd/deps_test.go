package cmd

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBinaryHoldsNoTestCode checks that the fetch binary is built from no
// test helper: `go list -deps` of the main package names no fetchtest
// package, and no package of this module that the binary holds mentions
// microsocks (the SOCKS5 server only the tests start). The demo's servers
// come from internal/loopback instead.
func TestBinaryHoldsNoTestCode(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not on PATH: %v", err)
	}
	cmd := exec.Command(goBin, "list", "-deps", "-json=ImportPath,Dir,GoFiles,Module", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, stderr.Bytes())
	}
	type pkg struct {
		ImportPath string
		Dir        string
		GoFiles    []string
		Module     *struct{ Path string }
	}
	const module = "github.com/fetch-dev/fetch"
	var ours []string
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if strings.Contains(p.ImportPath, "fetchtest") {
			t.Errorf("the binary depends on %s", p.ImportPath)
		}
		if p.Module == nil || p.Module.Path != module {
			continue
		}
		ours = append(ours, p.ImportPath)
		for _, f := range p.GoFiles {
			b, err := os.ReadFile(filepath.Join(p.Dir, f))
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(bytes.ToLower(b), []byte("microsocks")) {
				t.Errorf("%s/%s, built into the binary, mentions microsocks", p.ImportPath, f)
			}
		}
	}
	// The check means something only if it saw the demo's package.
	if !strings.Contains(strings.Join(ours, " "), module+"/internal/loopback") {
		t.Errorf("go list -deps found no %s/internal/loopback among %v", module, ours)
	}
}

// TestBinaryCallsNoMethodByName: the linker keeps only the methods the
// fetch binary calls. A call of reflect.Value.MethodByName with a name
// not known at link time, or of reflect.Value.Method, makes it keep every
// exported method of every type that reaches an interface, whether called
// or not: text/template, behind cobra's SetUsageTemplate and
// SetVersionTemplate, brought them in and with them all of go-redis'
// commands, 18.8 MB of binary against 10.7 (stripped) and a slower start
// of every run. go-redis' ClusterClient calls MethodByName("SetVal"), a
// constant the linker follows: that keeps the symbol but not the methods.
// So the test counts go-redis' commands in the binary: a handful, not
// hundreds.
func TestBinaryCallsNoMethodByName(t *testing.T) {
	out, err := exec.Command("go", "tool", "nm", fetchBinary(t)).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool nm: %v\n%s", err, out)
	}
	n, commands := 0, 0
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		n++
		if strings.HasPrefix(f[len(f)-1], "github.com/redis/go-redis/v9.cmdable.") {
			commands++
		}
	}
	if commands > 40 {
		t.Errorf("the binary holds %d of go-redis' commands: the linker keeps every exported method", commands)
	}
	if n < 1000 {
		t.Fatalf("go tool nm listed only %d symbols", n)
	}
}
