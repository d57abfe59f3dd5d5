package cmd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/results"
)

// TestTestdataRequests runs the sample JSON request lines of the README
// (testdata/requests.jsonl) against a loopback target put in the place of
// 127.0.0.1:8080, with --max-request-body, and checks the record of every
// line: its status and bytes, its id and meta, and the invalid lines'
// messages.
func TestTestdataRequests(t *testing.T) {
	target, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(target.Close)
	b, err := os.ReadFile(filepath.Join("..", "testdata", "requests.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	in := writeFile(t, dir, "requests.jsonl", strings.ReplaceAll(string(b), "127.0.0.1:8080", target.Addr))
	out := filepath.Join(dir, "out.jsonl")
	ios, _, _, stderr := Test()
	if code := Run(context.Background(), ios, []string{"-q", "-o", out, "--max-request-body", "64KiB", in}); code != ExitNotAllOK {
		t.Errorf("exit code %d, want %d (the invalid lines); stderr:\n%s", code, ExitNotAllOK, stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		status   int
		bytes    int64
		id, meta string
		says     string // an invalid line's message holds it
	}
	wants := map[int]want{
		6:  {status: 200, bytes: 64, id: `"item-17"`, meta: `{"batch":3}`},
		7:  {status: 200, bytes: 16, id: `18`},
		8:  {status: 404, id: `"item-19"`},
		9:  {status: 200, bytes: 32},
		13: {id: `"bad-1"`, says: `"body" and "body_base64"`},
		14: {id: `"bad-2"`, says: `"url" is missing`},
	}
	recs := readRecords(t, data)
	if len(recs) != len(wants) {
		t.Errorf("%d records, want %d", len(recs), len(wants))
	}
	for _, r := range recs {
		w, ok := wants[r.Line]
		if !ok {
			t.Errorf("record for line %d", r.Line)
			continue
		}
		if string(r.ID) != w.id || string(r.Meta) != w.meta {
			t.Errorf("line %d: id %s meta %s, want %s and %s", r.Line, r.ID, r.Meta, w.id, w.meta)
		}
		if w.says != "" {
			if r.OK || r.Error == nil || r.Error.Kind != results.KindInvalid || !strings.Contains(r.Error.Message, w.says) {
				t.Errorf("line %d: %+v, want invalid saying %q", r.Line, r.Error, w.says)
			}
			continue
		}
		if !r.OK || r.Status != w.status || r.Bytes != w.bytes || !strings.Contains(r.URL, target.Addr) {
			t.Errorf("line %d: %s ok %v status %d bytes %d error %+v, want %+v", r.Line, r.URL, r.OK, r.Status, r.Bytes, r.Error, w)
		}
	}
}
