package savedir

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch/errkind"
	"github.com/fetch-dev/fetch/fetch/input"
)

// TestName: a name is made of safe bytes, never starts with a dot, is
// bounded, and differs for two lines of the same URL.
func TestName(t *testing.T) {
	line := func(raw string, n int) *input.Line {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return &input.Line{Input: "list.txt", Number: n, URL: u}
	}
	a := Name(line("http://.hidden.test/../a b/"+strings.Repeat("x", 300), 1))
	if strings.HasPrefix(a, ".") || strings.ContainsAny(a, "/ \\") || len(a) > 100+1+12 {
		t.Errorf("unsafe or unbounded name %q", a)
	}
	if b := Name(line("http://.hidden.test/../a b/"+strings.Repeat("x", 300), 2)); b == a {
		t.Errorf("two lines share the name %q", a)
	}
}

// TestPrepare: the directory is made, the partial bodies older than the
// timeout are removed, the others and the saved bodies kept.
func TestPrepare(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	if err := Prepare(dir, time.Minute); err != nil {
		t.Fatal(err)
	}
	old, fresh, saved := filepath.Join(dir, Partial+"old"), filepath.Join(dir, Partial+"fresh"), filepath.Join(dir, "x-0123")
	for _, f := range []string{old, fresh, saved} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-time.Hour)
	os.Chtimes(old, long, long)
	os.Chtimes(saved, long, long)
	if err := Prepare(dir, time.Minute); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]bool{old: false, fresh: true, saved: true} {
		if _, err := os.Stat(f); (err == nil) != want {
			t.Errorf("%s: kept %v, want %v", filepath.Base(f), err == nil, want)
		}
	}
}

// TestWriter: a failed write is a *errkind.SaveError.
func TestWriter(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	var se *errkind.SaveError
	if _, err := Writer(f).Write([]byte("x")); !errors.As(err, &se) {
		t.Errorf("%v, want a *errkind.SaveError", err)
	}
}
