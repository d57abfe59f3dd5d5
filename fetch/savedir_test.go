package fetch_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/results"
)

// TestSaveDirNames saves the bodies of URLs whose paths and hosts try to
// leave the directory, and checks that every file is a plain, distinct
// name right inside --save-dir and that nothing was written anywhere else.
func TestSaveDirNames(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	_, port, _ := net.SplitHostPort(tg.Addr)
	long := strings.Repeat("very-long-segment/", 500) // cut to 7000 bytes below: under the 8 KiB line limit
	lines := []string{
		tg.URL + "/../../../../etc/passwd",
		tg.URL + "/%2e%2e/%2e%2e/%2e%2e/x",
		tg.URL + "/%2E%2E%2F%2E%2E%2Fx",
		tg.URL + "/..%5c..%5cx",
		tg.URL + "/.hidden",
		tg.URL + "/...",
		tg.URL + "/",
		tg.URL,
		tg.URL + "/a/b/c/",
		tg.URL + "/x?to=../../y#../z",
		tg.URL + "/" + long[:7000],
		tg.URL + "/" + strings.Repeat("../", 2500),
		tg.URL + "/\u00fcn\u00efc\u00f6d\u00e9/%00/%ff",
		"http://localhost:" + port + "/odd-host",
		"http://LOCALHOST:" + port + "/odd-host",
		"http://user:pw@127.0.0.1:" + port + "/userinfo",
		"http://127.0.0.1:" + port + "/../../etc/passwd", // same file name as line 1, another line
	}
	parent := t.TempDir()
	dir := filepath.Join(parent, "out")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := fetch.DefaultConfig()
	cfg.SaveDir = dir
	recs, _ := run(t, cfg, lines...)
	if len(recs) != len(lines) {
		t.Fatalf("%d records for %d lines", len(recs), len(lines))
	}
	files := map[string]int{}
	for line, r := range recs {
		if !r.OK {
			t.Errorf("line %d (%.60s): %+v", line, lines[line-1], r.Error)
			continue
		}
		name := filepath.Base(r.File)
		switch {
		case filepath.Dir(r.File) != dir:
			t.Errorf("line %d: file %q is not right inside %s", line, r.File, dir)
		case name == "." || name == ".." || strings.HasPrefix(name, "."):
			t.Errorf("line %d: file name %q", line, name)
		case strings.ContainsAny(name, `/\`+"\x00"):
			t.Errorf("line %d: file name %q has a separator", line, name)
		case len(name) > 255:
			t.Errorf("line %d: file name of %d bytes", line, len(name))
		}
		if other, dup := files[name]; dup {
			t.Errorf("lines %d and %d share the file %s", other, line, name)
		}
		files[name] = line
		if fi, err := os.Stat(r.File); err != nil || fi.Size() != r.Bytes {
			t.Errorf("line %d: %s: %v (record says %d bytes)", line, r.File, err, r.Bytes)
		}
	}
	// Nothing but the named files in dir, and nothing but dir in parent.
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(files) {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("%s holds %d entries, %d files recorded: %v", dir, len(entries), len(files), names)
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 1 {
		t.Errorf("%s holds %d entries, want only out/", parent, len(entries))
	}
}

// TestSaveDirFailures makes saving fail in each way a directory can fail
// and checks that every line still gets a record, failed with the reason,
// and that the run goes on.
func TestSaveDirFailures(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	lines := func(n int, query string) []string {
		var ls []string
		for i := range n {
			ls = append(ls, tg.URL+"/f/"+string(rune('a'+i))+query)
		}
		return ls
	}
	check := func(t *testing.T, recs map[int]*results.Record, n int, dir string) {
		t.Helper()
		if len(recs) != n {
			t.Fatalf("%d records for %d lines", len(recs), n)
		}
		for line, r := range recs {
			if r.OK || r.Error == nil || r.File != "" {
				t.Errorf("line %d: ok=%v file=%q error %+v, want a failed record", line, r.OK, r.File, r.Error)
				continue
			}
			if r.Error.Phase != results.PhaseBody || !strings.Contains(r.Error.Message, "saving body") {
				t.Errorf("line %d: error %+v, want a body error about saving", line, r.Error)
			}
		}
		if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
			t.Errorf("%s holds %d entries after failed saves", dir, len(entries))
		}
	}
	cfg := fetch.DefaultConfig()

	t.Run("missing", func(t *testing.T) {
		cfg := cfg
		cfg.SaveDir = filepath.Join(t.TempDir(), "missing", "deeper")
		recs, _ := run(t, cfg, lines(3, "?size=10")...)
		check(t, recs, 3, cfg.SaveDir)
	})
	t.Run("not a directory", func(t *testing.T) {
		cfg := cfg
		cfg.SaveDir = filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(cfg.SaveDir, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		recs, _ := run(t, cfg, lines(3, "?size=10")...)
		check(t, recs, 3, cfg.SaveDir)
	})
	t.Run("read-only or full", func(t *testing.T) {
		cfg := cfg
		cfg.SaveDir = t.TempDir()
		query := "?size=10"
		if os.Geteuid() == 0 {
			// Root writes through file modes: fill a disk instead, a
			// 64 KiB tmpfs, with 100 KiB bodies.
			if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", cfg.SaveDir).CombinedOutput(); err != nil {
				t.Fatalf("mount a small tmpfs to fill: %v: %s", err, out)
			}
			t.Cleanup(func() { exec.Command("umount", cfg.SaveDir).Run() })
			query = "?size=102400"
		} else {
			if err := os.Chmod(cfg.SaveDir, 0o555); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Chmod(cfg.SaveDir, 0o755) })
		}
		recs, _ := run(t, cfg, lines(3, query)...)
		check(t, recs, 3, cfg.SaveDir)
		for line, r := range recs {
			if r.Attempts != 1 {
				t.Errorf("line %d: %d attempts; a local write failure is not retried", line, r.Attempts)
			}
		}
	})
	t.Run("removed mid-run", func(t *testing.T) {
		cfg := cfg
		cfg.SaveDir = filepath.Join(t.TempDir(), "out")
		if err := os.Mkdir(cfg.SaveDir, 0o755); err != nil {
			t.Fatal(err)
		}
		// Bodies take about 200ms; the directory goes after 60ms, while
		// every body is being written.
		removed := make(chan error, 1)
		tm := time.AfterFunc(60*time.Millisecond, func() { removed <- os.RemoveAll(cfg.SaveDir) })
		defer tm.Stop()
		recs, _ := run(t, cfg, lines(6, "?size=400&chunks=4&drip=50ms")...)
		if err := <-removed; err != nil {
			t.Fatal(err)
		}
		check(t, recs, 6, cfg.SaveDir)
	})
}
