package cmd

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime/debug"
	"sync/atomic"
	"testing"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/internal/gcfloor"
)

// TestRunPausesGCForTheStart: with the process's floor in the context (as
// Main has it), collection is paused while the list is read and the engine
// built, and back on before the first request and after every way out: a
// run, a run with --resume, and a usage error after the pause began.
func TestRunPausesGCForTheStart(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	floor := gcfloor.Start(8 << 20)
	defer floor.Stop()
	ctx := withFloor(context.Background(), floor)

	var requests, paused atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if floor.Percent() < 0 {
			paused.Add(1)
		}
	}))
	defer target.Close()
	px, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	dir := t.TempDir()
	urls := writeFile(t, dir, "urls.txt", target.URL+"/a\n"+target.URL+"/b\n")
	list := writeFile(t, dir, "proxies.txt", px.URL+"\n")
	out := filepath.Join(dir, "out.jsonl")
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"run", []string{"-q", "-p", list, "-o", out, urls}, ExitOK},
		{"resume", []string{"-q", "-p", list, "-o", out, "--resume", urls}, ExitOK},
		{"usage error", []string{"-q", "-p", filepath.Join(dir, "missing.txt"), urls}, ExitUsage},
	} {
		ios, _, _, stderr := Test()
		if code := Run(ctx, ios, tc.args); code != tc.code {
			t.Fatalf("%s: exit %d, want %d; stderr:\n%s", tc.name, code, tc.code, stderr)
		}
		if p := floor.Percent(); p < 0 {
			t.Errorf("%s: collection still paused after the run (percentage %d)", tc.name, p)
		}
	}
	if requests.Load() != 2 || paused.Load() != 0 {
		t.Errorf("%d requests, %d of them while collection was paused; want 2 and 0", requests.Load(), paused.Load())
	}
}
